-- wrk script for bench/run.sh: POST the JSON body in $BENCH_BODY and print one machine-readable
-- line. Latencies are wrk's (send of the request to the last byte of the response), in µs.
wrk.method = "POST"
wrk.body = os.getenv("BENCH_BODY") or error("BENCH_BODY is not set")
wrk.headers["Content-Type"] = "application/json"

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "BENCH requests=%d duration_us=%d errors=%d status_errors=%d "
      .. "p50_us=%d p90_us=%d p99_us=%d p999_us=%d mean_us=%.2f max_us=%d\n",
    summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout, e.status,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency:percentile(99.9), latency.mean, latency.max))
end
