-- wrk script for bench/traces.sh: post.lua's request, as the model calls of agent runs: every
-- RUN_CALLS requests (4) of a thread share an `x-rein-run-id` of their own, so rein's run guards
-- count and check each call in the store. Prints the same machine-readable line as post.lua.
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY") or error("BENCH_BODY is not set")
wrk.headers["Content-Type"] = "application/json"
local run_calls = tonumber(os.getenv("RUN_CALLS") or "4")

local threads = 0
function setup(thread)
  threads = threads + 1
  thread:set("tid", threads)
end

local n = 0
function request()
  wrk.headers["x-rein-run-id"] =
    string.format("bench-%d-%d-%d", os.time(), tid or 0, math.floor(n / run_calls))
  n = n + 1
  return wrk.format()
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d errors=%d status_errors=%d "
      .. "p50_us=%d p90_us=%d p99_us=%d p999_us=%d mean_us=%.2f max_us=%d\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.max))
end
