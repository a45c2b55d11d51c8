#!/usr/bin/env bash
# Loopback overhead benchmark: the same fixed upstream (nginx answering a fixed chat completion)
# hit directly, through a bare nginx reverse proxy, through a proxy of hyper alone (bench/floor:
# rein's HTTP stack with nothing of rein's own) and through `rein serve`, interleaved in
# rounds, non-streaming and streaming. Prints a markdown table and writes it to
# bench/results/latest.md. See bench/README.md for what is measured and how to read it.
#
#   bash bench/run.sh                      # ~4-5 minutes on a 2-core machine
#   DURATION=10 ROUNDS=5 bash bench/run.sh # longer, steadier
#   PROFILE=1 bash bench/run.sh            # also perf-profile rein under 32 connections
#
# Environment:
#   DURATION      seconds per wrk run (default 4)
#   ROUNDS        interleaved rounds; the table reports medians across rounds (default 3)
#   CONNS         connections for the throughput runs (default 32)
#   PROBE_COUNT   requests per streaming first-byte probe (default 300)
#   PROFILE       1: record `perf` profiles of rein (needs perf; installs linux-perf)
#   INSTRUCTIONS  1: count rein's user-space instructions per request under callgrind
#                 (needs valgrind); a stable measure to compare two builds by
#   IR_LOG        RUST_LOG of the rein under callgrind (default warn: no line a call; `info`,
#                 rein's default, counts the `call finished` line each call logs)
#   REIN_BIN      use this rein binary instead of building one
#   BUILD_PROFILE the cargo profile rein and the floor are built with (dist: what to deploy)
#   FLOOR_BIN     use this floor-proxy binary (bench/floor) instead of building one
#   OUT           where to write the markdown (default bench/results/latest.md)
#   KEEP_TMP      1: keep the temp dir with configs, logs and raw numbers
set -euo pipefail
BUILD_PROFILE=${BUILD_PROFILE:-dist}

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
LIB="$BENCH_DIR/lib"
DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
PROBE_COUNT=${PROBE_COUNT:-300}
PROFILE=${PROFILE:-0}
INSTRUCTIONS=${INSTRUCTIONS:-0}
OUT=${OUT:-$BENCH_DIR/results/latest.md}
SIM_DELAY_MS=20

log() { printf '[bench %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- tools -------------------------------------------------------------------------------------
need=()
command -v nginx >/dev/null || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
if [ "$PROFILE" = 1 ] && ! perf version >/dev/null 2>&1; then need+=(linux-perf); fi
if [ "$INSTRUCTIONS" = 1 ] && ! command -v valgrind >/dev/null; then need+=(valgrind); fi
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get install -y ${need[*]})"
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

REIN_ORIGIN="built from the work tree"
if [ -n "${REIN_BIN:-}" ]; then
  REIN_ORIGIN="given as REIN_BIN, work tree"
else
  log "building rein (profile $BUILD_PROFILE)"
  (cd "$ROOT" && cargo build --profile "$BUILD_PROFILE" -p rein --quiet)
  REIN_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$BUILD_PROFILE/rein"
fi
[ -x "$REIN_BIN" ] || die "no rein binary at $REIN_BIN"
if [ -z "${FLOOR_BIN:-}" ]; then
  log "building the floor proxy (profile $BUILD_PROFILE)"
  (cd "$ROOT" && cargo build --profile "$BUILD_PROFILE" -p rein-bench-floor --quiet)
  FLOOR_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$BUILD_PROFILE/floor-proxy"
fi
[ -x "$FLOOR_BIN" ] || die "no floor-proxy binary at $FLOOR_BIN"

# --- temp dir, ports, cleanup ------------------------------------------------------------------
TMP=$(mktemp -d /tmp/rein-bench.XXXXXX)
chmod 755 "$TMP" # nginx workers run as nobody when started by root
# A private copy: a concurrent `cargo build` must not swap the binary under the run.
cp "$REIN_BIN" "$TMP/rein-bin"
REIN_BIN="$TMP/rein-bin"
cp "$FLOOR_BIN" "$TMP/floor-bin"
FLOOR_BIN="$TMP/floor-bin"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r UP_PORT PROXY_PORT REIN_PORT SIM_PORT FLOOR_PORT < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(5)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)

# --- configs -----------------------------------------------------------------------------------
# nginx `return` text. nginx caps one config token at 4 kB, so a body is cut at event
# boundaries into single-quoted pieces (\ and ' escaped, newlines as \n), each `set` to a
# variable; `return 200 "$body0$body1..."` joins them.
nginx_body() { # file var-prefix -> "set" lines, then the return argument on the last line
  python3 - "$1" "$2" <<'PY'
import sys
text, prefix = open(sys.argv[1]).read(), sys.argv[2]
if "$" in text:
    sys.exit(f"{sys.argv[1]}: a body must not contain $ (nginx variables)")
# An SSE body is cut after whole events ("\n\n"); anything else stays whole (under 3 kB).
events = [e + "\n\n" for e in text.split("\n\n") if e] if "\n\n" in text else [text]
pieces = [""]
for event in events:
    if pieces[-1] and len(pieces[-1]) + len(event) > 3000:
        pieces.append("")
    pieces[-1] += event
def quote(t):
    return "'" + t.replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
for i, p in enumerate(pieces):
    print(f"set ${prefix}{i} {quote(p)};")
print('"' + "".join(f"${prefix}{i}" for i in range(len(pieces))) + '"')
PY
}
COMPLETION=$(nginx_body "$LIB/completion.json" json)
STREAM=$(nginx_body "$LIB/stream.sse" sse)
CHECKED=$(nginx_body "$LIB/completion-checked.json" checked)

nginx_common() { # $1: dir
  cat <<EOF
worker_processes auto;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 4096; multi_accept on; }
EOF
}
nginx_http_common() { # $1: dir
  cat <<EOF
  access_log off;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server_tokens off;
EOF
}

mkdir -p "$TMP/upstream" "$TMP/proxy" "$TMP/rein"
# (1) the fixed upstream: JSON under /v1, SSE under /sse/v1 (rein's openai_compatible adapter
# always asks for `stream: true` and reads what the content type says).
{
  nginx_common "$TMP/upstream"
  cat <<EOF
http {
$(nginx_http_common "$TMP/upstream")
  server {
    listen 127.0.0.1:$UP_PORT;
    location = /v1/chat/completions {
      default_type application/json;
      $(sed '$d' <<<"$COMPLETION")
      return 200 $(tail -1 <<<"$COMPLETION");
    }
    location = /sse/v1/chat/completions {
      default_type text/event-stream;
      add_header Cache-Control no-cache;
      $(sed '$d' <<<"$STREAM")
      return 200 $(tail -1 <<<"$STREAM");
    }
    location = /checked/v1/chat/completions {
      default_type application/json;
      $(sed '$d' <<<"$CHECKED")
      return 200 $(tail -1 <<<"$CHECKED");
    }
  }
}
EOF
} >"$TMP/upstream/nginx.conf"

# (2) a bare reverse proxy: pooled keep-alive upstream connections, unbuffered for SSE.
{
  nginx_common "$TMP/proxy"
  cat <<EOF
http {
$(nginx_http_common "$TMP/proxy")
  upstream fixed { server 127.0.0.1:$UP_PORT; keepalive 64; keepalive_requests 100000000; }
  server {
    listen 127.0.0.1:$PROXY_PORT;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    location /v1/ { proxy_pass http://fixed; }
    location /sse/ { proxy_pass http://fixed; proxy_buffering off; }
  }
}
EOF
} >"$TMP/proxy/nginx.conf"

# (3) rein: checked routes (the default) and a passthrough route on the same upstream, and the
# simulator for the behaviour check.
cat >"$TMP/rein/rein.toml" <<EOF
[server]
listen = "127.0.0.1:$REIN_PORT"
drain_timeout_ms = 1000

[store]
sqlite_path = "$TMP/rein/rein.sqlite"

[providers.fixed-json]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$UP_PORT/v1"

[providers.fixed-sse]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$UP_PORT/sse/v1"

[providers.fixed-checked]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$UP_PORT/checked/v1"

[providers.sim]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$SIM_PORT/v1"

# Non-streaming against a JSON upstream: the same bytes from the upstream as direct and nginx.
[routes.bench]
[[routes.bench.tiers]]
name = "primary"
provider = "fixed-json"
model = "bench-model"

# Checked, against the SSE upstream (what a real provider answers to rein's stream: true).
[routes.bench-sse]
[[routes.bench-sse.tiers]]
name = "primary"
provider = "fixed-sse"
model = "bench-model"

# Validation on and off, on the same answer (a JSON object citing an article): the schema and
# two rules against the evidence the caller passes in the body's \`rein\` object.
[routes.bench-obj]
[[routes.bench-obj.tiers]]
name = "primary"
provider = "fixed-checked"
model = "bench-model"

[routes.bench-valid]
[[routes.bench-valid.tiers]]
name = "primary"
provider = "fixed-checked"
model = "bench-model"
[routes.bench-valid.output]
rules = [
  { rule = "cited_ids_returned", ids_at = "/article_ids", source = "search", item = "article" },
  { rule = "numbers_in_cited_text", text_at = "/reply", ids_at = "/article_ids", item = "article" },
]
[routes.bench-valid.output.schema]
type = "object"
required = ["reply", "article_ids", "needs_human"]
additionalProperties = false
[routes.bench-valid.output.schema.properties]
reply = { type = "string", maxLength = 1200 }
article_ids = { type = "array", items = { type = "string" } }
needs_human = { type = "boolean" }

[routes.bench-pt]
release = "passthrough"
[[routes.bench-pt.tiers]]
name = "primary"
provider = "fixed-sse"
model = "bench-model"

[routes.sim-pt]
release = "passthrough"
[[routes.sim-pt.tiers]]
name = "primary"
provider = "sim"
model = "sim:token_delay:ms=$SIM_DELAY_MS"

[routes.sim-checked]
[[routes.sim-checked.tiers]]
name = "primary"
provider = "sim"
model = "sim:token_delay:ms=$SIM_DELAY_MS"
EOF

# --- start everything --------------------------------------------------------------------------
wait_port() { # port name pid
  local i
  for i in $(seq 1 100); do
    kill -0 "$3" 2>/dev/null || die "$2 exited at start (see logs in $TMP)"
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$2 did not listen on $1"
}

nginx -t -q -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" 2>"$TMP/upstream/test.log" \
  || { cat "$TMP/upstream/test.log" >&2; die "upstream nginx config"; }
nginx -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" 2>>"$TMP/upstream/stderr.log" &
UP_PID=$!; PIDS+=("$UP_PID")
nginx -p "$TMP/proxy" -c "$TMP/proxy/nginx.conf" 2>>"$TMP/proxy/stderr.log" &
PROXY_PID=$!; PIDS+=("$PROXY_PID")
"$REIN_BIN" sim --listen "127.0.0.1:$SIM_PORT" >"$TMP/sim.log" 2>&1 &
SIM_PID=$!; PIDS+=("$SIM_PID")
wait_port "$UP_PORT" "upstream nginx" "$UP_PID"
wait_port "$PROXY_PORT" "nginx proxy" "$PROXY_PID"
wait_port "$SIM_PORT" "rein sim" "$SIM_PID"
# (4) the floor: hyper's server and pooled client, an event loop a core, as in rein.
"$FLOOR_BIN" "127.0.0.1:$FLOOR_PORT" "http://127.0.0.1:$UP_PORT" 2>"$TMP/floor.log" &
FLOOR_PID=$!; PIDS+=("$FLOOR_PID")
wait_port "$FLOOR_PORT" "floor proxy" "$FLOOR_PID"

RUST_LOG=${RUST_LOG:-warn} "$REIN_BIN" serve --config "$TMP/rein/rein.toml" \
  >"$TMP/rein/stdout.log" 2>"$TMP/rein/stderr.log" &
REIN_PID=$!; PIDS+=("$REIN_PID")
for _ in $(seq 1 100); do
  grep -q "rein listening on" "$TMP/rein/stdout.log" "$TMP/rein/stderr.log" 2>/dev/null && break
  kill -0 "$REIN_PID" 2>/dev/null || { cat "$TMP/rein/stderr.log" >&2; die "rein serve exited"; }
  sleep 0.1
done
wait_port "$REIN_PORT" "rein serve" "$REIN_PID"

RAW="$TMP/raw.tsv"
: >"$RAW"
record() { printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$RAW"; } # round section target conc key value

# Process ids whose CPU and memory count for a target: the nginx workers (the master only
# accepts signals), or the rein process (all its threads).
workers() { # the worker pids of an nginx master (forked just after it starts listening)
  local w _
  for _ in $(seq 1 50); do
    w=$(pgrep -P "$1" | tr '\n' ' ' || true)
    [ -n "$w" ] && { echo "$w"; return 0; }
    sleep 0.1
  done
  die "nginx $1 has no workers"
}
UP_WORKERS=$(workers "$UP_PID")
PROXY_WORKERS=$(workers "$PROXY_PID")
pids_of() {
  case "$1" in
    direct | s-direct) echo "$UP_WORKERS" ;;
    nginx | s-nginx) echo "$PROXY_WORKERS" ;;
    floor | s-floor) echo "$FLOOR_PID" ;;
    *) echo "$REIN_PID" ;;
  esac
}
cpu_ticks() { local p t=0; for p in "$@"; do t=$((t + $(sed 's/^.*) //' "/proc/$p/stat" | awk '{print $12 + $13}'))); done; echo "$t"; }
ctx_switches() { local p t=0; for p in "$@"; do t=$((t + $(cat /proc/"$p"/task/*/status 2>/dev/null | awk '/ctxt_switches/ {s += $2} END {print s + 0}'))); done; echo "$t"; }
mem_kib() { # field pids... -> summed kB
  local f=$1 p t=0; shift
  for p in "$@"; do t=$((t + $(awk -v f="$f:" '$1 == f {print $2}' "/proc/$p/status"))); done
  echo "$t"
}
TICK=$(getconf CLK_TCK)

sleep 1
record 0 mem rein - idle_rss_kib "$(mem_kib VmRSS "$REIN_PID")"
# shellcheck disable=SC2086
record 0 mem nginx - idle_rss_kib "$(mem_kib VmRSS "$PROXY_PID" $PROXY_WORKERS)"
# shellcheck disable=SC2086
record 0 mem direct - idle_rss_kib "$(mem_kib VmRSS "$UP_PID" $UP_WORKERS)"
record 0 mem floor - idle_rss_kib "$(mem_kib VmRSS "$FLOOR_PID")"

# --- targets -----------------------------------------------------------------------------------
body() { # model stream
  case "$1" in bench-obj | bench-valid) # the evidence the validated route's rules check against
    printf '{"model":"%s","messages":[{"role":"user","content":"where is my order?"}],"rein":{"evidence":[{"id":"140","source":"search","text":"Orders ship the next day and arrive within 48 hours."}]}}' "$1"
    return ;;
  esac
  if [ "$2" = 1 ]; then
    printf '{"model":"%s","messages":[{"role":"user","content":"where is my order?"}],"stream":true}' "$1"
  else
    printf '{"model":"%s","messages":[{"role":"user","content":"where is my order?"}]}' "$1"
  fi
}
# target -> "port path model stream"
target_of() {
  case "$1" in
    direct) echo "$UP_PORT /v1/chat/completions bench 0" ;;
    nginx) echo "$PROXY_PORT /v1/chat/completions bench 0" ;;
    floor) echo "$FLOOR_PORT /v1/chat/completions bench 0" ;;
    rein) echo "$REIN_PORT /v1/chat/completions bench 0" ;;
    rein-sse) echo "$REIN_PORT /v1/chat/completions bench-sse 0" ;;
    rein-obj) echo "$REIN_PORT /v1/chat/completions bench-obj 0" ;;
    rein-valid) echo "$REIN_PORT /v1/chat/completions bench-valid 0" ;;
    s-direct) echo "$UP_PORT /sse/v1/chat/completions bench 1" ;;
    s-nginx) echo "$PROXY_PORT /sse/v1/chat/completions bench 1" ;;
    s-floor) echo "$FLOOR_PORT /sse/v1/chat/completions bench 1" ;;
    s-rein-pt) echo "$REIN_PORT /v1/chat/completions bench-pt 1" ;;
    s-rein-checked) echo "$REIN_PORT /v1/chat/completions bench-sse 1" ;;
  esac
}
NONSTREAM=(direct nginx floor rein rein-sse rein-obj rein-valid)
STREAMING=(s-direct s-nginx s-floor s-rein-pt s-rein-checked)

# --- sanity: every path answers 200 with the expected body -------------------------------------
check() {
  local t=$1 port path model stream hdr out
  read -r port path model stream <<<"$(target_of "$t")"
  out=$(curl -sS -D "$TMP/headers" -o - -H 'content-type: application/json' \
    --data "$(body "$model" "$stream")" "http://127.0.0.1:$port$path") || die "$t: curl failed"
  hdr=$(head -1 "$TMP/headers")
  [[ "$hdr" == *" 200"* ]] || die "$t: $hdr: $out"
  if [ "$stream" = 1 ]; then
    [[ "$out" == *"Thursday."* && "$out" == *"[DONE]"* ]] || die "$t: unexpected stream: $out"
  elif [[ "$model" == bench-obj || "$model" == bench-valid ]]; then
    [[ "$out" == *"within 48 hours"* ]] || die "$t: unexpected answer: $out"
  else
    [[ "$out" == *"Thursday."* ]] || die "$t: unexpected answer: $out"
  fi
  if [ "$t" = s-rein-pt ]; then # passthrough sends headers before the outcome is known
    grep -qi '^x-rein-release: passthrough' "$TMP/headers" || die "$t: not passthrough: $(cat "$TMP/headers")"
  elif [ "$port" = "$REIN_PORT" ]; then
    grep -qi '^x-rein-outcome: answered' "$TMP/headers" || die "$t: rein did not answer: $(cat "$TMP/headers")"
  fi
}
for t in "${NONSTREAM[@]}" "${STREAMING[@]}"; do check "$t"; done
# The validated route really checks: with evidence that lacks the answer's number, its rule
# refuses the answer (one re-ask, then no tier can answer).
refused=$(curl -sS -o /dev/null -w '%{http_code}' -H 'content-type: application/json' \
  --data "$(body bench-valid 0 | sed 's/arrive within 48 hours/arrive within 72 hours/')" \
  "http://127.0.0.1:$REIN_PORT/v1/chat/completions") || die "rein-valid: curl failed"
[ "$refused" != 200 ] || die "rein-valid: an answer its rules refuse was served"
log "all paths answer; upstream :$UP_PORT, nginx proxy :$PROXY_PORT, floor :$FLOOR_PORT, rein :$REIN_PORT, sim :$SIM_PORT"

# --- measurements ------------------------------------------------------------------------------
wrk_run() { # target conns threads duration -> BENCH line
  local port path model stream
  read -r port path model stream <<<"$(target_of "$1")"
  BENCH_BODY=$(body "$model" "$stream") wrk -t"$3" -c"$2" -d"$4"s --timeout 5s \
    -s "$LIB/post.lua" "http://127.0.0.1:$port$path" | grep '^BENCH '
}
measure() { # round section target conns threads
  local round=$1 section=$2 t=$3 conns=$4 threads=$5 pids c0 c1 x0 x1 line kv k v requests=0 dur=1
  pids=$(pids_of "$t")
  # shellcheck disable=SC2086
  c0=$(cpu_ticks $pids)
  # shellcheck disable=SC2086
  x0=$(ctx_switches $pids)
  line=$(wrk_run "$t" "$conns" "$threads" "$DURATION") || die "$t: wrk failed"
  # shellcheck disable=SC2086
  c1=$(cpu_ticks $pids)
  # shellcheck disable=SC2086
  x1=$(ctx_switches $pids)
  for kv in ${line#BENCH }; do
    k=${kv%%=*}; v=${kv#*=}
    record "$round" "$section" "$t" "$conns" "$k" "$v"
    case "$k" in requests) requests=$v ;; duration_us) dur=$v ;; errors | status_errors)
      [ "$v" = 0 ] || log "warning: $t c$conns: $k=$v" ;;
    esac
  done
  record "$round" "$section" "$t" "$conns" rps "$(awk -v r="$requests" -v d="$dur" 'BEGIN {printf "%.1f", r / (d / 1e6)}')"
  record "$round" "$section" "$t" "$conns" cpu_us_per_req \
    "$(awk -v c=$((c1 - c0)) -v r="$requests" -v hz="$TICK" 'BEGIN {printf "%.2f", r ? c / hz * 1e6 / r : 0}')"
  record "$round" "$section" "$t" "$conns" ctxsw_per_req \
    "$(awk -v x=$((x1 - x0)) -v r="$requests" 'BEGIN {printf "%.3f", r ? x / r : 0}')"
}
probe() { # round target count [port path body]
  local port path model stream out k
  read -r port path model stream <<<"$(target_of "$2")"
  out=$(python3 "$LIB/sse_probe.py" 127.0.0.1 "$port" "$path" "$(body "$model" 1)" "$3") \
    || die "$2: probe failed"
  for k in ttfb_p50_us ttfb_p99_us ttlb_p50_us ttlb_p99_us events; do
    record "$1" probe "$2" 1 "$k" "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$out" "$k")"
  done
}

# How much of the machine other work took during the rounds: all busy CPU time (/proc/stat)
# minus this run's own (the daemons, and every reaped child of this shell: wrk, the probes).
# Busy = user + nice + system + irq + softirq: tick-based accounting charges softirq time (the
# loopback TCP delivery) to the interrupted task too. Steal is the hypervisor's, not a process's.
busy_total() { awk '/^cpu / {print $2 + $3 + $4 + $7 + $8, $2 + $3 + $4 + $5 + $6 + $7 + $8 + $9}' /proc/stat; }
own_ticks() {
  # shellcheck disable=SC2086
  echo $(($(cpu_ticks "$UP_PID" $UP_WORKERS "$PROXY_PID" $PROXY_WORKERS "$SIM_PID" "$REIN_PID" "$FLOOR_PID") \
    + $(sed 's/^.*) //' /proc/$$/stat | awk '{print $14 + $15}')))
}
read -r BUSY0 TOTAL0 < <(busy_total)
OWN0=$(own_ticks)
log "warm-up"
for t in "${NONSTREAM[@]}" "${STREAMING[@]}"; do wrk_run "$t" "$CONNS" 2 1 >/dev/null; done

for round in $(seq 1 "$ROUNDS"); do
  log "round $round/$ROUNDS: non-streaming"
  for t in "${NONSTREAM[@]}"; do measure "$round" nonstream "$t" 1 1; done
  for t in "${NONSTREAM[@]}"; do measure "$round" nonstream "$t" "$CONNS" 2; done
  log "round $round/$ROUNDS: streaming"
  for t in "${STREAMING[@]}"; do measure "$round" stream "$t" 1 1; done
  for t in "${STREAMING[@]}"; do measure "$round" stream "$t" "$CONNS" 2; done
  for t in "${STREAMING[@]}"; do probe "$round" "$t" "$PROBE_COUNT"; done
done

# --- behaviour: passthrough must not hold back the first event (rein sim, slow tokens) ---------
log "behaviour: first event through passthrough vs checked (rein sim, ${SIM_DELAY_MS} ms per token)"
SIM_BODY_MODEL="sim:token_delay:ms=$SIM_DELAY_MS"
for t in sim-direct sim-rein-pt sim-rein-checked; do
  case "$t" in
    sim-direct) port=$SIM_PORT model=$SIM_BODY_MODEL ;;
    sim-rein-pt) port=$REIN_PORT model=sim-pt ;;
    sim-rein-checked) port=$REIN_PORT model=sim-checked ;;
  esac
  out=$(python3 "$LIB/sse_probe.py" 127.0.0.1 "$port" /v1/chat/completions "$(body "$model" 1)" 5 1) \
    || die "$t: probe failed"
  for k in ttfb_p50_us ttlb_p50_us events; do
    record 0 behaviour "$t" 1 "$k" "$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])[sys.argv[2]])' "$out" "$k")"
  done
done

read -r BUSY1 TOTAL1 < <(busy_total)
OWN1=$(own_ticks)
record 0 machine all - busy_own_total_ticks "$((BUSY1 - BUSY0)) $((OWN1 - OWN0)) $((TOTAL1 - TOTAL0))"
OTHERS=$(awk -v b=$((BUSY1 - BUSY0)) -v o=$((OWN1 - OWN0)) -v t=$((TOTAL1 - TOTAL0)) \
  'BEGIN {x = (b - o) / t * 100; printf "%.1f", x < 0 ? 0 : x}')
if awk -v x="$OTHERS" 'BEGIN {exit !(x > 5)}'; then
  log "warning: other processes used $OTHERS% of the CPU during the rounds: the numbers are skewed"
fi
record 0 mem rein - peak_rss_kib "$(mem_kib VmHWM "$REIN_PID")"
record 0 mem rein - after_rss_kib "$(mem_kib VmRSS "$REIN_PID")"
record 0 mem floor - peak_rss_kib "$(mem_kib VmHWM "$FLOOR_PID")"
record 0 mem floor - after_rss_kib "$(mem_kib VmRSS "$FLOOR_PID")"
# shellcheck disable=SC2086
record 0 mem nginx - peak_rss_kib "$(mem_kib VmHWM "$PROXY_PID" $PROXY_WORKERS)"
# shellcheck disable=SC2086
record 0 mem direct - peak_rss_kib "$(mem_kib VmHWM "$UP_PID" $UP_WORKERS)"

# --- optional profile --------------------------------------------------------------------------
# perf pads its columns to the longest symbol; drop the padding, the comment lines and the IPC
# columns, and cut generic-heavy names short.
tidy_perf() { grep -v '^#' | grep -v '^$' | sed 's/[[:space:]]*-[[:space:]]*-[[:space:]]*$//; s/[[:space:]]*$//' | cut -c1-200; }
if [ "$PROFILE" = 1 ]; then
  mkdir -p "$BENCH_DIR/results"
  for t in rein s-rein-pt; do
    log "profiling rein under $CONNS connections: $t"
    perf record -q -F 997 --call-graph dwarf,8192 -p "$REIN_PID" -o "$TMP/perf-$t.data" \
      -- sleep "$DURATION" 2>"$TMP/perf-$t.log" &
    perf_pid=$!
    wrk_run "$t" "$CONNS" 2 "$DURATION" >/dev/null
    wait "$perf_pid" || true
    {
      echo "# perf: rein serve under wrk -t2 -c$CONNS for ${DURATION}s, target $t ($(date -u +%FT%TZ))"
      echo "# perf record -F 997 --call-graph dwarf -p REIN_PID; percentages are of rein's samples"
      echo; echo "## by stage (share of samples whose stack passes through it; lib/perf_stages.py)"
      timeout 600 perf script -i "$TMP/perf-$t.data" -F comm,ip,sym 2>/dev/null | python3 "$LIB/perf_stages.py" || true
      echo; echo "## by shared object"
      perf report -i "$TMP/perf-$t.data" --stdio --no-children --sort dso -g none 2>/dev/null | tidy_perf | head -12 || true
      echo; echo "## self time by symbol (flat, >= 0.4%)"
      perf report -i "$TMP/perf-$t.data" --stdio --no-children --sort dso,symbol -g none --percent-limit 0.4 2>/dev/null | tidy_perf | head -60 || true
      echo; echo "## inclusive time (children) of rein, hyper, hyper-util, axum, serde and tokio sync frames (>= 1%)"
      perf report -i "$TMP/perf-$t.data" --stdio --children --sort symbol -g none --percent-limit 1 2>/dev/null | tidy_perf \
        | grep -E 'rein_|hyper::|hyper_util::|axum::|serde_json::|tokio::sync|tokio::time|tracing|http::header|__GI___writev|__libc_recv|__GI___libc_read|epoll_wait|futex' \
        | grep -v '(inlined)' | head -70 || true
    } >"$BENCH_DIR/results/profile-$t.txt"
    log "wrote bench/results/profile-$t.txt"
  done
fi

# --- optional instruction counts ---------------------------------------------------------------
# Wall-clock CPU time on a shared 2-core VM varies by ~15% between runs; the number of user-space
# instructions rein executes per request does not (< 1%), so it is what tells two builds apart.
# rein runs under callgrind with one worker on its own port; each target gets a warm-up, then
# the counters are zeroed, a fixed-duration wrk run is counted, and the counters are dumped.
if [ "$INSTRUCTIONS" = 1 ]; then
  mkdir -p "$BENCH_DIR/results" "$TMP/ir"
  IR_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  sed -e "s/127.0.0.1:$REIN_PORT/127.0.0.1:$IR_PORT/" -e 's/^\[server\]$/[server]\nworkers = 1/' \
    -e "s#^sqlite_path = .*#sqlite_path = \"$TMP/ir/rein.sqlite\"#" "$TMP/rein/rein.toml" >"$TMP/ir/rein.toml"
  log "instruction counts: rein under callgrind"
  (cd "$TMP/ir" && RUST_LOG="${IR_LOG:-warn}" exec valgrind --tool=callgrind --callgrind-out-file="$TMP/ir/cg.out" \
    "$REIN_BIN" serve --config "$TMP/ir/rein.toml" >"$TMP/ir/stdout.log" 2>"$TMP/ir/stderr.log") &
  IR_PID=$!; PIDS+=("$IR_PID")
  for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$IR_PORT") 2>/dev/null && break; sleep 0.2; done
  {
    echo "# User-space instructions per request (callgrind), work tree at $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo
    echo "rein serve with one worker under \`valgrind --tool=callgrind\`, \`wrk -t1 -c4\` for 4 s per target after a"
    echo "2 s warm-up; the kernel's share (syscalls, TCP) is not counted. Stable to < 1% between runs."
    echo "\`floor\` / \`s-floor\`: the hyper proxy of bench/floor (rein's HTTP stack alone), counted the same way"
    echo "(one event loop a core under valgrind, which runs one thread at a time); the JSON and the SSE upstream."
    echo
    echo "| target | requests counted | instructions per request |"
    echo "|---|--:|--:|"
  } >"$TMP/ir/report.md"
  count_ir() { # pid port out-prefix targets... -> a table row each
    local pid=$1 port=$2 prefix=$3 t dump=0 path model stream url line requests ir
    shift 3
    for t in "$@"; do
      read -r _ path model stream <<<"$(target_of "$t")"
      url="http://127.0.0.1:$port$path"
      BENCH_BODY=$(body "$model" "$stream") wrk -t1 -c4 -d2s -s "$LIB/post.lua" "$url" >/dev/null
      callgrind_control -z "$pid" >/dev/null
      line=$(BENCH_BODY=$(body "$model" "$stream") wrk -t1 -c4 -d4s -s "$LIB/post.lua" "$url" | grep '^BENCH ')
      callgrind_control --dump="$t" "$pid" >/dev/null
      dump=$((dump + 1))
      requests=$(sed 's/.*requests=\([0-9]*\).*/\1/' <<<"$line")
      ir=$(awk '/^summary:/ {print $2}' "$prefix.$dump")
      echo "| $t | $requests | $(awk -v i="$ir" -v r="$requests" 'BEGIN {printf "%d", i / r}') |" >>"$TMP/ir/report.md"
    done
  }
  count_ir "$IR_PID" "$IR_PORT" "$TMP/ir/cg.out" rein rein-sse s-rein-pt
  kill -TERM "$IR_PID" 2>/dev/null || true
  # The floor (hyper alone) the same way: what rein's own work adds is the difference.
  FLOOR_IR_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  valgrind --tool=callgrind --callgrind-out-file="$TMP/ir/cg-floor.out" \
    "$FLOOR_BIN" "127.0.0.1:$FLOOR_IR_PORT" "http://127.0.0.1:$UP_PORT" 2>"$TMP/ir/floor.log" &
  FLOOR_IR_PID=$!; PIDS+=("$FLOOR_IR_PID")
  for _ in $(seq 1 300); do (exec 3<>"/dev/tcp/127.0.0.1/$FLOOR_IR_PORT") 2>/dev/null && break; sleep 0.2; done
  count_ir "$FLOOR_IR_PID" "$FLOOR_IR_PORT" "$TMP/ir/cg-floor.out" floor s-floor
  kill -TERM "$FLOOR_IR_PID" 2>/dev/null || true
  {
    echo
    echo "## Where the instructions of \`rein\` (non-streaming, JSON upstream) go: exclusive, top 30"
    echo
    echo '```'
    callgrind_annotate --auto=no --threshold=100 "$TMP/ir/cg.out.1" 2>/dev/null | sed -n '/file:function/,$p' \
      | grep -v 'libc-start\|(below main)\|lang_start\|block_on\|enter_runtime\|__rust_begin_short_backtrace\|rein::main\|???:main\|ld-linux\|clone.S\|pthread_create\|thread_start\|vtable.shim' \
      | sed -n '3,32p' | sed -E 's#[^ ]*/\.cargo/registry/src/[^/]+/##; s#/rustc/[0-9a-f]+/##' | sed "s#$ROOT/##" | sed -E 's/ \[[^]]*\]$//' | cut -c1-200
    echo '```'
  } >>"$TMP/ir/report.md"
  cp "$TMP/ir/report.md" "$BENCH_DIR/results/instructions.md"
  cat "$BENCH_DIR/results/instructions.md" >&2
  log "wrote bench/results/instructions.md"
fi

# --- report ------------------------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
machine="$(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(free -g | awk '/Mem:/ {print $2}') GiB, Linux $(uname -r)"
python3 "$LIB/report.py" "$RAW" \
  --machine "$machine" \
  --rein "$("$REIN_BIN" --version 2>/dev/null || echo rein), $REIN_ORIGIN at $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes')" \
  --tools "$(nginx -v 2>&1 | sed 's/^nginx version: //'), wrk $(wrk -v 2>&1 | awk 'NR==1 {print $2}'), Python $(python3 -c 'import platform; print(platform.python_version())')" \
  --duration "$DURATION" --rounds "$ROUNDS" --conns "$CONNS" --probe-count "$PROBE_COUNT" \
  --sim-delay "$SIM_DELAY_MS" --others "$OTHERS" | tee "$OUT"
log "wrote ${OUT#"$ROOT"/}"
