#!/usr/bin/env bash
# Brownout soak: `rein serve` under an open-loop load of RATE req/s for DURATION seconds (half
# streaming, half not) against `rein sim` playing a primary in a brownout (30 % 529, slow first
# tokens, stalls and cuts; lib/soak-scenario.toml) and a healthy fallback. Reports the share of
# requests answered or degraded inside the deadline, p50/p99 latency over time, upstream attempts
# per request against 1.2 x requests + the retry budget's floor, and rein's RSS and open file
# descriptors over time: markdown to bench/results/soak.md and a PNG beside it. See
# bench/README.md ("Brownout soak").
#
#   bash bench/soak.sh                       # 30 minutes at 200 req/s
#   DURATION=600 bash bench/soak.sh          # the 10-minute CI-sized run
#   DURATION=60 KEEP_TMP=1 bash bench/soak.sh
#
# Environment:
#   DURATION   seconds of load (default 1800)
#   RATE       requests per second, open loop (default 200)
#   REIN_BIN   use this rein binary instead of building one (BUILD_PROFILE, dist by default)
#   OUT        where to write the markdown (default bench/results/soak.md); the PNG goes beside
#              it with the same name and .png
#   KEEP_TMP   1: keep the temp dir (config, logs, requests, samples, the simulator's attempt log)
#   VENV       the Python venv with aiohttp and matplotlib (default bench/.venv-soak; made if
#              missing)
set -euo pipefail
BUILD_PROFILE=${BUILD_PROFILE:-dist}

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
LIB="$BENCH_DIR/lib"
DURATION=${DURATION:-1800}
RATE=${RATE:-200}
OUT=${OUT:-$BENCH_DIR/results/soak.md}
PNG="${OUT%.md}.png"
VENV=${VENV:-$BENCH_DIR/.venv-soak}

# The route under test (also written into the config below and passed to the report).
DEADLINE_MS=10000
FIRST_TOKEN_MS=1500
STREAM_IDLE_MS=1000
ATTEMPT_MS=4000
BUDGET_RATIO=0.2
BUDGET_MIN_PER_S=1
BUDGET_WINDOW_S=10
PRIMARY_MODEL=soak-primary
FALLBACK_MODEL="sim:token_delay:ms=20"
DEGRADED_TEXT="We are answering slowly right now. Your question is saved and a person will reply within the hour."

log() { printf '[soak %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- tools -------------------------------------------------------------------------------------
need=()
command -v python3 >/dev/null || need+=(python3 python3-venv)
command -v curl >/dev/null || need+=(curl)
python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get install -y ${need[*]})"
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi
if ! "$VENV/bin/python" -c 'import aiohttp, matplotlib' 2>/dev/null; then
  log "making the venv $VENV (aiohttp, matplotlib)"
  python3 -m venv "$VENV"
  echo '*' >"$VENV/.gitignore" # keeps the venv out of git wherever it is
  "$VENV/bin/pip" install -q --upgrade pip
  "$VENV/bin/pip" install -q aiohttp matplotlib
fi
PY="$VENV/bin/python"

REIN_ORIGIN="built from the work tree"
if [ -n "${REIN_BIN:-}" ]; then
  REIN_ORIGIN="given as REIN_BIN, work tree"
else
  log "building rein (profile $BUILD_PROFILE)"
  (cd "$ROOT" && cargo build --profile "$BUILD_PROFILE" -p rein --quiet)
  REIN_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$BUILD_PROFILE/rein"
fi
[ -x "$REIN_BIN" ] || die "no rein binary at $REIN_BIN"

# Open loop: every request in flight holds a client socket here and one in rein.
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

# --- temp dir, ports, cleanup ------------------------------------------------------------------
TMP=$(mktemp -d /tmp/rein-soak.XXXXXX)
# A private copy: a concurrent `cargo build` must not swap the binary under the run.
cp "$REIN_BIN" "$TMP/rein-bin"
REIN_BIN="$TMP/rein-bin"
PIDS=()
cleanup() {
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

read -r REIN_PORT SIM_PORT < <(python3 - <<'EOF'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks:
    s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])
EOF
)

# --- config ------------------------------------------------------------------------------------
# Two providers on the one simulator, as a primary and a fallback vendor would be: each has its
# own retry budget. The scenario's phase matches only the primary's model.
cat >"$TMP/rein.toml" <<EOF
[server]
listen = "127.0.0.1:$REIN_PORT"
drain_timeout_ms = 2000

[store]
sqlite_path = "$TMP/rein.sqlite"

[retry_budget]
ratio = $BUDGET_RATIO
min_retries_per_s = $BUDGET_MIN_PER_S
window_s = $BUDGET_WINDOW_S

[providers.primary]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$SIM_PORT/v1"

[providers.fallback]
kind = "openai_compatible"
base_url = "http://127.0.0.1:$SIM_PORT/v1"

# A 10 s deadline; a first token within 1.5 s (the brownout's slow ones take 3 s), no gap of
# more than 1 s between tokens (a stall), at most 4 s per attempt. Two attempts per tier, the
# default backoff, breaker and cooldown.
[routes.soak]
deadline_ms = $DEADLINE_MS
first_token_ms = $FIRST_TOKEN_MS
stream_idle_ms = $STREAM_IDLE_MS
attempt_ms = $ATTEMPT_MS
degraded = { template = "$DEGRADED_TEXT" }

[[routes.soak.tiers]]
name = "primary"
provider = "primary"
model = "$PRIMARY_MODEL"

[[routes.soak.tiers]]
name = "fallback"
provider = "fallback"
model = "$FALLBACK_MODEL"
EOF

# --- start -------------------------------------------------------------------------------------
wait_port() { # port name pid
  local _
  for _ in $(seq 1 100); do
    kill -0 "$3" 2>/dev/null || die "$2 exited at start (see logs in $TMP)"
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$2 did not listen on $1"
}

"$REIN_BIN" sim --listen "127.0.0.1:$SIM_PORT" --scenario "$LIB/soak-scenario.toml" \
  --log "$TMP/attempts.jsonl" >"$TMP/sim.log" 2>&1 &
SIM_PID=$!; PIDS+=("$SIM_PID")
wait_port "$SIM_PORT" "rein sim" "$SIM_PID"

RUST_LOG=${RUST_LOG:-warn} "$REIN_BIN" serve --config "$TMP/rein.toml" \
  >"$TMP/rein-stdout.log" 2>"$TMP/rein-stderr.log" &
REIN_PID=$!; PIDS+=("$REIN_PID")
wait_port "$REIN_PORT" "rein serve" "$REIN_PID"

# Sanity: the route answers with rein's outcome header, and /metrics has the breaker gauges.
out=$(curl -sS -D "$TMP/headers" -H 'content-type: application/json' \
  --data "{\"model\":\"soak\",\"messages\":[{\"role\":\"user\",\"content\":\"warm-up\"}]}" \
  "http://127.0.0.1:$REIN_PORT/v1/chat/completions") || die "warm-up request failed"
grep -qi '^x-rein-outcome: ' "$TMP/headers" || die "no x-rein-outcome: $(cat "$TMP/headers") $out"
# Read whole first: `grep -q` stops reading at its match, and curl failing to write the rest
# would fail the pipe under pipefail.
metrics=$(curl -sS "http://127.0.0.1:$REIN_PORT/metrics") || die "rein's /metrics did not answer"
grep -q '^rein_tier_breaker_state' <<<"$metrics" \
  || die "rein's /metrics has no rein_tier_breaker_state"
# The warm-up's attempts are not the run's: the log starts over.
curl -sS -X POST "http://127.0.0.1:$SIM_PORT/_sim/reset" >/dev/null
sleep 1
: >"$TMP/attempts.jsonl"
log "rein :$REIN_PORT (pid $REIN_PID), sim :$SIM_PORT; $RATE req/s for $DURATION s"

"$PY" "$LIB/soak_sample.py" --pid "$REIN_PID" --metrics "http://127.0.0.1:$REIN_PORT/metrics" \
  --upstream-port "$SIM_PORT" --out "$TMP/samples.jsonl" 2>"$TMP/sampler.log" &
SAMPLER_PID=$!; PIDS+=("$SAMPLER_PID")

"$PY" "$LIB/soak_load.py" --url "http://127.0.0.1:$REIN_PORT/v1/chat/completions" --route soak \
  --rate "$RATE" --duration "$DURATION" --timeout $((DEADLINE_MS / 1000 + 20)) \
  --degraded-text "$DEGRADED_TEXT" --out "$TMP/requests.jsonl" --meta "$TMP/meta.json" \
  || die "the load generator failed"
sleep 10 # the simulator's last log lines; the sampler sees rein idle again
kill -TERM "$SAMPLER_PID" 2>/dev/null || true
wait "$SAMPLER_PID" 2>/dev/null || true
kill -0 "$REIN_PID" 2>/dev/null || die "rein serve died during the run (see $TMP/rein-stderr.log)"

# --- report ------------------------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
machine="$(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(free -g | awk '/Mem:/ {print $2}') GiB, Linux $(uname -r)"
rev="$(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes')"
warnings=$(grep -c ' WARN \| ERROR ' "$TMP/rein-stderr.log" || true)
settings="\`bash bench/soak.sh\` with DURATION=$DURATION, RATE=$RATE: an open-loop generator \
(\`lib/soak_load.py\`, aiohttp) sends requests on schedule whatever the latency, every other one \
streaming, to the route \`soak\`: deadline ${DEADLINE_MS} ms, first token ${FIRST_TOKEN_MS} ms, \
stream idle ${STREAM_IDLE_MS} ms, attempt ${ATTEMPT_MS} ms, 2 attempts per tier, retry budget \
ratio ${BUDGET_RATIO} / ${BUDGET_MIN_PER_S} per s / ${BUDGET_WINDOW_S} s window, default breaker \
(3 failed calls in a row, 30 s cooldown), a degraded reply. Tier \`primary\` is \`rein sim\` \
playing \`lib/soak-scenario.toml\` (30 % 529, 10 % 3 s first token, 5 % stall after 5 tokens, \
5 % cut after 5 tokens, 50 % healthy, 20 ms a token); tier \`fallback\` is the same simulator, \
healthy at 20 ms a token. rein logged $warnings WARN/ERROR lines."
"$PY" "$LIB/soak_report.py" --dir "$TMP" --md "$OUT" --png "$PNG" \
  --deadline-ms "$DEADLINE_MS" --ratio "$BUDGET_RATIO" --min-retries "$BUDGET_MIN_PER_S" \
  --providers 2 --primary-model "$PRIMARY_MODEL" --machine "$machine" \
  --rein "$("$REIN_BIN" --version 2>/dev/null || echo rein), $REIN_ORIGIN at $rev" \
  --settings "$settings"
log "wrote ${OUT#"$ROOT"/} and ${PNG#"$ROOT"/}"
