#!/usr/bin/env bash
# What recording and exporting traces cost a call, and that a dead collector costs it nothing:
# the same rein binary with the same routes against one fixed upstream (nginx answering a fixed
# chat completion), started four ways and measured interleaved in rounds:
#   off        [traces] enabled = false: no record, no trace
#   store      the default: every call's record and trace written to SQLite off the request path
#   otlp-dead  store + [traces.otlp] pointing at a port nothing listens on (every export fails)
#   otlp-live  store + export to a live Arize Phoenix (only with REIN_PHOENIX_BIN set)
#   otlp-live-runs  otlp-live, and every 4 calls of a connection are one agent run (`x-rein-run-id`,
#              lib/post_run.lua): the run guards count and check each call in the store
# Reports req/s, p50/p99 latency and CPU per request at CONNS connections and p50 at 1, with the
# ratio of each to `off` and to `store` (the default), and what each dropped. A benchmark: it asserts
# nothing; see bench/README.md.
#
#   bash bench/traces.sh                 # ~3 minutes on a 2-core machine, plus the first build
#   DURATION=10 ROUNDS=5 bash bench/traces.sh
#
# Environment: DURATION (s per wrk run, 4), ROUNDS (3), CONNS (32), REIN_BIN (a rein binary;
# else built with the cargo profile BUILD_PROFILE, dist by default), REIN_PHOENIX_BIN (a
# `phoenix` executable: adds otlp-live), BASE_BIN (a second rein binary, the baseline: each
# variant also runs on it, `VARIANT@base`, interleaved in the same rounds, and the report adds
# this build's ratios to it), OUT (bench/results/traces-latest.md).
set -euo pipefail
BUILD_PROFILE=${BUILD_PROFILE:-dist}

DURATION=${DURATION:-4}
ROUNDS=${ROUNDS:-3}
CONNS=${CONNS:-32}
BENCH_DIR=$(cd "$(dirname "$0")" && pwd)
ROOT=$(dirname "$BENCH_DIR")
LIB="$BENCH_DIR/lib"
OUT=${OUT:-$BENCH_DIR/results/traces-latest.md}
log() { printf '[traces %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

need=()
command -v nginx >/dev/null || need+=(nginx)
command -v wrk >/dev/null || need+=(wrk)
command -v curl >/dev/null || need+=(curl)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get install -y ${need[*]})"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ -z "${REIN_BIN:-}" ]; then
  log "building rein (profile $BUILD_PROFILE)"
  (cd "$ROOT" && cargo build --profile "$BUILD_PROFILE" -p rein --quiet)
  REIN_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$BUILD_PROFILE/rein"
fi
[ -x "$REIN_BIN" ] || die "no rein binary at $REIN_BIN"
[ -z "${BASE_BIN:-}" ] || [ -x "$BASE_BIN" ] || die "no rein binary at BASE_BIN=$BASE_BIN"

TMP=$(mktemp -d)
cp "$REIN_BIN" "$TMP/rein"
REIN_BIN="$TMP/rein"
if [ -n "${BASE_BIN:-}" ]; then
  cp "$BASE_BIN" "$TMP/rein-base"
  BASE_BIN="$TMP/rein-base"
fi
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$TMP"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
  local i
  for i in $(seq 1 300); do
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$2 did not listen on $1"
}

# The fixed upstream: the same JSON completion for every request.
UP_PORT=$(free_port)
mkdir -p "$TMP/upstream/logs"
body=$(python3 -c 'import json,sys; print(json.dumps(json.load(open(sys.argv[1])), separators=(",",":")).replace("\\","\\\\").replace("\"","\\\""))' "$LIB/completion.json")
cat >"$TMP/upstream/nginx.conf" <<EOF
worker_processes 1;
daemon off;
error_log $TMP/upstream/logs/error.log warn;
pid $TMP/upstream/nginx.pid;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$UP_PORT;
    location / { default_type application/json; return 200 "$body"; }
  }
}
EOF
nginx -p "$TMP/upstream" -c "$TMP/upstream/nginx.conf" 2>>"$TMP/upstream/stderr.log" &
PIDS+=($!)
wait_port "$UP_PORT" "upstream nginx"

DEAD_PORT=$(free_port) # nothing listens here
VARIANTS=(off store otlp-dead)
if [ -n "${REIN_PHOENIX_BIN:-}" ]; then
  PHX_PORT=$(free_port)
  PHX_GRPC=$(free_port)
  mkdir -p "$TMP/phoenix"
  PHOENIX_PORT=$PHX_PORT PHOENIX_GRPC_PORT=$PHX_GRPC PHOENIX_HOST=127.0.0.1 \
    PHOENIX_WORKING_DIR="$TMP/phoenix" "$REIN_PHOENIX_BIN" serve >"$TMP/phoenix.log" 2>&1 &
  PIDS+=($!)
  wait_port "$PHX_PORT" "phoenix"
  VARIANTS+=(otlp-live otlp-live-runs)
fi
if [ -n "${BASE_BIN:-}" ]; then # each variant beside its baseline, so both see the same moment
  paired=()
  for v in "${VARIANTS[@]}"; do paired+=("$v" "$v@base"); done
  VARIANTS=("${paired[@]}")
fi

declare -A PORT PID
for v in "${VARIANTS[@]}"; do
  PORT[$v]=$(free_port)
  mkdir -p "$TMP/$v"
  traces=""
  case "${v%@base}" in
    off) traces=$'[traces]\nenabled = false' ;;
    otlp-dead) traces=$'[traces.otlp]\nendpoint = "http://127.0.0.1:'"$DEAD_PORT"$'/v1/traces"\ntimeout_ms = 1000' ;;
    otlp-live | otlp-live-runs) traces=$'[traces.otlp]\nendpoint = "http://127.0.0.1:'"$PHX_PORT"$'/v1/traces"' ;;
  esac
  cat >"$TMP/$v/rein.toml" <<EOF
[server]
listen = "127.0.0.1:${PORT[$v]}"
drain_timeout_ms = 1000

[store]
sqlite_path = "$TMP/$v/rein.sqlite"

$traces

[providers.fixed]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$UP_PORT/v1"

[routes.bench]
[[routes.bench.tiers]]
name = "primary"
provider = "fixed"
model = "bench-model"
EOF
  bin=$REIN_BIN
  [[ "$v" == *@base ]] && bin=$BASE_BIN
  RUST_LOG=error "$bin" serve --config "$TMP/$v/rein.toml" >"$TMP/$v/stdout.log" 2>"$TMP/$v/stderr.log" &
  PID[$v]=$!
  PIDS+=("${PID[$v]}")
  wait_port "${PORT[$v]}" "rein ($v)"
done

TICK=$(getconf CLK_TCK)
cpu_ticks() { sed 's/^.*) //' "/proc/$1/stat" | awk '{print $12 + $13}'; }
BODY='{"model":"bench","messages":[{"role":"user","content":"where is my order?"}]}'
RAW="$TMP/raw.tsv"
: >"$RAW"
run() { # variant conns -> records rps, p50, p99, cpu
  local v=$1 c=$2 c0 c1 line requests dur p50 p99 script=$LIB/post.lua
  [ "${v%@base}" = otlp-live-runs ] && script=$LIB/post_run.lua
  c0=$(cpu_ticks "${PID[$v]}")
  line=$(BENCH_BODY=$BODY wrk -t"$((c < 2 ? 1 : 2))" -c"$c" -d"${DURATION}s" --timeout 5s -s "$script" \
    "http://127.0.0.1:${PORT[$v]}/v1/chat/completions" | grep '^BENCH ') || die "$v: wrk failed"
  c1=$(cpu_ticks "${PID[$v]}")
  requests=$(sed 's/.* requests=\([0-9]*\).*/\1/' <<<"$line")
  dur=$(sed 's/.* duration_us=\([0-9]*\).*/\1/' <<<"$line")
  p50=$(sed 's/.* p50_us=\([0-9]*\).*/\1/' <<<"$line")
  p99=$(sed 's/.* p99_us=\([0-9]*\).*/\1/' <<<"$line")
  grep -q 'status_errors=0' <<<"$line" || log "warning: $v c$c: $line"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$v" "$c" \
    "$(awk -v r="$requests" -v d="$dur" 'BEGIN {printf "%.1f", r / (d / 1e6)}')" "$p50" "$p99" \
    "$(awk -v t=$((c1 - c0)) -v r="$requests" -v hz="$TICK" 'BEGIN {printf "%.2f", r ? t / hz * 1e6 / r : 0}')" >>"$RAW"
}

log "warm-up"
for v in "${VARIANTS[@]}"; do run "$v" "$CONNS"; done
: >"$RAW"
for round in $(seq 1 "$ROUNDS"); do
  log "round $round/$ROUNDS"
  for v in "${VARIANTS[@]}"; do run "$v" 1; done
  for v in "${VARIANTS[@]}"; do run "$v" "$CONNS"; done
done

# What each variant dropped, from its own metrics: call records (the recorder's queue was full),
# spans (queue_full: the exporter fell behind; export_failed: the collector was down), spans
# exported, and runs stopped (none is expected: a run here is 4 calls, under every limit).
sleep 3
COUNTERS="$TMP/counters.tsv"
: >"$COUNTERS"
metric() { awk -v m="$2" 'index($0, m) == 1 {sum += $2} END {printf "%d", sum}' <<<"$1"; }
for v in "${VARIANTS[@]}"; do
  m=$(curl -s "http://127.0.0.1:${PORT[$v]}/metrics")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$v" "$(metric "$m" rein_call_records_dropped_total)" \
    "$(metric "$m" 'rein_trace_spans_dropped_total{reason="queue_full"}')" \
    "$(metric "$m" 'rein_trace_spans_dropped_total{reason="export_failed"}')" \
    "$(metric "$m" rein_trace_spans_exported_total)" "$(metric "$m" rein_run_stops_total)" >>"$COUNTERS"
done

mkdir -p "$(dirname "$OUT")"
python3 - "$RAW" "$CONNS" "$DURATION" "$ROUNDS" "$COUNTERS" >"$OUT" <<'PY'
import statistics, sys
raw, conns, duration, rounds, counters = sys.argv[1:]
rows = {}
for line in open(raw):
    v, c, rps, p50, p99, cpu = line.split()
    rows.setdefault((v, c), []).append((float(rps), float(p50), float(p99), float(cpu)))
med = lambda xs: statistics.median(xs)
variants = []
for (v, _c) in rows:
    if v not in variants:
        variants.append(v)
def col(v, c, i):
    return med([r[i] for r in rows[(v, c)]])
print(f"# Traces: what recording and exporting cost a call ({rounds} rounds x {duration} s, medians)\n")
print("Ratios to `off` (no record, no trace) and to `store` (the default: every call's record, routine")
print("traces up to a rate). Lower is better except req/s.\n")
print(f"| variant | req/s @{conns} | vs off | vs store | p50 ms @{conns} | p99 ms @{conns} | CPU µs/req @{conns} | vs off | vs store | p50 ms @1 | vs off | vs store |")
print("|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|")
for v in variants:
    rps, p50, p99, cpu = (col(v, conns, i) for i in range(4))
    p50_1 = col(v, "1", 1)
    suffix = "@base" if v.endswith("@base") else ""
    o = ("off" + suffix, "store" + suffix)
    r = [col(b, conns, 0) for b in o]
    c = [col(b, conns, 3) for b in o]
    l = [col(b, "1", 1) for b in o]
    print(f"| {v} | {rps:.0f} | {rps / r[0]:.3f} | {rps / r[1]:.3f} | {p50 / 1000:.3f} | {p99 / 1000:.3f} "
          f"| {cpu:.1f} | {cpu / c[0]:.3f} | {cpu / c[1]:.3f} | {p50_1 / 1000:.3f} | {p50_1 / l[0]:.3f} | {p50_1 / l[1]:.3f} |")
runs = [v for v in variants if v.startswith("otlp-live-runs")]
if runs:
    print()
for v in runs:
    live = v.replace("otlp-live-runs", "otlp-live")
    print(f"A model call in a run ({v}), traces exported live: {col(v, conns, 3) / col(live, conns, 3):.2f}x "
          f"the CPU of the same call outside a run ({live}; target <= 1.10x), "
          f"{col(v, conns, 0) / col(live, conns, 0):.2f}x its req/s.")
base = [v for v in variants if not v.endswith("@base") and v + "@base" in variants]
if base:
    print("\nThis build against the baseline (`BASE_BIN`), the same variant in the same rounds:\n")
    print(f"| variant | req/s @{conns} | CPU µs/req @{conns} | p50 ms @1 |")
    print("|---|--:|--:|--:|")
    for v in base:
        b = v + "@base"
        print(f"| {v} | {col(v, conns, 0) / col(b, conns, 0):.3f} | {col(v, conns, 3) / col(b, conns, 3):.3f} "
              f"| {col(v, '1', 1) / col(b, '1', 1):.3f} |")
print("\n| variant | call records dropped | spans dropped: queue full | spans dropped: export failed | spans exported | runs stopped |")
print("|---|--:|--:|--:|--:|--:|")
for line in open(counters):
    v, *counts = line.split()
    print(f"| {v} | " + " | ".join(f"{int(n):,}" for n in counts) + " |")
PY
cat "$OUT"
