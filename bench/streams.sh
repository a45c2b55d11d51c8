#!/usr/bin/env bash
# Memory per open stream: N slow SSE streams (`rein sim` with a token delay, each lasting
# HOLD seconds) opened within RAMP seconds and held, through a bare nginx reverse proxy and
# through `rein serve` (passthrough and checked routes, to the sims over HTTP/1.1 and over
# cleartext HTTP/2). At the plateau (every stream open,
# none ended) it samples the proxy's RSS; per stream = (plateau - idle) / N. Then every stream
# is read to its end and counted whole (200, every token, `[DONE]`) or failed. Also rein's idle
# RSS (1 s after start, no request). Each measurement starts the proxy afresh. Writes markdown
# to bench/results/streams.md. See bench/README.md ("Open streams").
#
#   bash bench/streams.sh                    # N = 1000 and 10000: ~5 minutes, plus the build
#   NS=1000 HOLD=20 bash bench/streams.sh    # one size, shorter streams
#
# Environment:
#   NS            stream counts to measure, space-separated (default "1000 10000")
#   HOLD          seconds each stream lasts (the sim's token delay is set from it; default 25)
#   RAMP          seconds over which the N streams are opened (default 5)
#   TARGETS       what to measure (default "nginx rein-pt rein-checked rein-pt-h2
#                 rein-checked-h2"; `-h2`: rein speaks HTTP/2 to the sims, `http_version`)
#   CLIENT_PROCS  client processes sharing the streams (default 4)
#   SIMS          `rein sim` processes the streams are spread over (default 2: a sim holds two
#                 descriptors per connection, so one cannot hold 10000 under a 20000 limit)
#   REIN_BIN      use this rein binary instead of building one
#   BUILD_PROFILE the cargo profile rein is built with (dist: what to deploy)
#   RUST_LOG      rein's log filter (default: warnings, and a line per call); the warnings and
#                 the reasons of calls not answered go into the report
#   MESSAGE_BYTES the size of each request's user message (default: a short question, 18
#                 bytes; a larger one is that question padded with words, as a long prompt)
#   OUT           where to write the markdown (default bench/results/streams.md)
#   KEEP_TMP      1: keep the temp dir (configs, logs, raw results)
set -euo pipefail
BUILD_PROFILE=${BUILD_PROFILE:-dist}

BENCH_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$BENCH_DIR/.." && pwd)
LIB="$BENCH_DIR/lib"
NS=${NS:-"1000 10000"}
HOLD=${HOLD:-25}
RAMP=${RAMP:-5}
TARGETS=${TARGETS:-"nginx rein-pt rein-checked rein-pt-h2 rein-checked-h2"}
CLIENT_PROCS=${CLIENT_PROCS:-4}
SIMS=${SIMS:-2}
OUT=${OUT:-$BENCH_DIR/results/streams.md}
MESSAGE="where is my order?"
MESSAGE_BYTES=${MESSAGE_BYTES:-${#MESSAGE}}
[[ "$MESSAGE_BYTES" =~ ^[0-9]+$ ]] || { echo "MESSAGE_BYTES must be a number of bytes" >&2; exit 2; }
if [ "$MESSAGE_BYTES" -gt "${#MESSAGE}" ]; then # the question, then words up to the size
  MESSAGE=$(python3 -c 'import sys; q, n = sys.argv[1], int(sys.argv[2]); w = " and the order number is 12345"; print((q + w * (n // len(w) + 1))[:n])' "$MESSAGE" "$MESSAGE_BYTES")
fi
MESSAGE_BYTES=${#MESSAGE}

log() { printf '[streams %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- tools -------------------------------------------------------------------------------------
need=()
command -v nginx >/dev/null || need+=(nginx)
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
  [ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get install -y ${need[*]})"
  log "installing ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

REIN_ORIGIN="built from the work tree"
if [ -n "${REIN_BIN:-}" ]; then
  REIN_ORIGIN="given as REIN_BIN"
else
  log "building rein (profile $BUILD_PROFILE)"
  (cd "$ROOT" && cargo build --profile "$BUILD_PROFILE" -p rein --quiet)
  REIN_BIN="${CARGO_TARGET_DIR:-$ROOT/target}/$BUILD_PROFILE/rein"
fi
[ -x "$REIN_BIN" ] || die "no rein binary at $REIN_BIN"

# --- limits: every stream is two sockets in a proxy (client side, upstream side) ---------------
MAX_N=$(tr ' ' '\n' <<<"$NS" | sort -n | tail -1)
WANT_NOFILE=$((2 * MAX_N + 4096))
# Raise the hard limit where we may (root with CAP_SYS_RESOURCE), then the soft one to it.
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge "$WANT_NOFILE" ] || ulimit -Hn "$WANT_NOFILE" 2>/dev/null || true
ulimit -n "$(ulimit -Hn)"
NOFILE=$(ulimit -n)
[ "$NOFILE" != unlimited ] || NOFILE=$(sysctl -n fs.nr_open)
# Raise (never lower) the kernel's queues and the ephemeral port range where we may; the report
# says what was in force. Restored on exit.
SYSCTL_RESTORE=()
sysctl_set() { # key value (as root; the old value is restored on exit)
  local now
  now=$(sysctl -n "$1" 2>/dev/null) || return 0
  [ "$(id -u)" = 0 ] || return 0
  if sysctl -q -w "$1=$2" 2>/dev/null; then
    SYSCTL_RESTORE+=("$1=$now")
    log "set $1=$2 (was $(tr '\t' ' ' <<<"$now"))"
  fi
}
[ "$(sysctl -n net.core.somaxconn)" -ge 4096 ] || sysctl_set net.core.somaxconn 4096
[ "$(sysctl -n net.ipv4.tcp_max_syn_backlog)" -ge 8192 ] || sysctl_set net.ipv4.tcp_max_syn_backlog 8192
read -r PORT_LO _ < <(sysctl -n net.ipv4.ip_local_port_range)
[ "$PORT_LO" -le 10000 ] || sysctl_set net.ipv4.ip_local_port_range "10000 65000"
sysctl_now() { printf '%s=%s; ' "$1" "$(sysctl -n "$1" 2>/dev/null | tr '\t' ' ' || echo '?')"; }
LIMITS="open files (soft = hard) $NOFILE per process; $(sysctl_now net.core.somaxconn)$(sysctl_now net.ipv4.tcp_max_syn_backlog)$(sysctl_now net.ipv4.ip_local_port_range)$(sysctl_now net.ipv4.tcp_tw_reuse)"
LIMITS=${LIMITS%; }

# --- temp dir, ports, cleanup ------------------------------------------------------------------
TMP=$(mktemp -d /tmp/rein-streams.XXXXXX)
chmod 755 "$TMP" # nginx workers run as nobody when started by root
cp "$REIN_BIN" "$TMP/rein-bin" # a concurrent `cargo build` must not swap the binary under the run
REIN_BIN="$TMP/rein-bin"
PIDS=()
cleanup() {
  local pid kv
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  for kv in "${SYSCTL_RESTORE[@]}"; do sysctl -q -w "$kv" 2>/dev/null || true; done
  if [ "${KEEP_TMP:-0}" = 1 ]; then log "kept $TMP"; else rm -rf "$TMP"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
wait_port() { # port name pid
  for _ in $(seq 1 100); do
    kill -0 "$3" 2>/dev/null || die "$2 exited at start (see logs in $TMP)"
    if (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  die "$2 did not listen on $1"
}
stop() { # pid: TERM, then KILL after 10 s
  local pid=$1
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
rss_kib() { local p t=0; for p in "$@"; do t=$((t + $(awk '$1 == "VmRSS:" {print $2}' "/proc/$p/status"))); done; echo "$t"; }
listen_drops() { awk '/^TcpExt:/ {if (!h) {split($0, k); h = 1} else {for (i = 2; i <= NF; i++) if (k[i] == "ListenDrops") print $i}}' /proc/net/netstat; }

# --- the simulators and the reference answer ---------------------------------------------------
SIM_PORTS=()
for i in $(seq 1 "$SIMS"); do
  port=$(free_port)
  "$REIN_BIN" sim --listen "127.0.0.1:$port" >"$TMP/sim-$i.log" 2>&1 &
  pid=$!; PIDS+=("$pid")
  wait_port "$port" "rein sim $i" "$pid"
  SIM_PORTS+=("$port")
done
SIM_PORT=${SIM_PORTS[0]}

BODY=$(printf '{"model":"%s","messages":[{"role":"user","content":"%s"}],"stream":true}' "sim:ok" "$MESSAGE")
curl -sS -H 'content-type: application/json' --data "$BODY" \
  "http://127.0.0.1:$SIM_PORT/v1/chat/completions" >"$TMP/reference.sse" || die "sim: no reference answer"
# The text every stream must carry, and how many tokens it comes in (the first is sent at once,
# then one per token delay).
TOKENS=$(python3 - "$TMP/reference.sse" "$TMP/expect.txt" <<'PY'
import json, sys
text, tokens = [], 0
for line in open(sys.argv[1]):
    if line.startswith("data:") and line[5:].strip() != "[DONE]":
        for choice in json.loads(line[5:]).get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                text.append(piece); tokens += 1
open(sys.argv[2], "w").write("".join(text))
print(tokens)
PY
)
[ "$TOKENS" -gt 1 ] || die "sim: reference answer has $TOKENS tokens"
DELAY_MS=$((HOLD * 1000 / (TOKENS - 1)))
SIM_MODEL="sim:token_delay:ms=$DELAY_MS"
log "$SIMS sims (:${SIM_PORTS[*]}) answer $TOKENS tokens; $SIM_MODEL makes each stream last ~${HOLD}s"

# --- configs -----------------------------------------------------------------------------------
# nginx: a bare reverse proxy, pooled keep-alive upstream connections (round robin over the
# sims), unbuffered. Each stream holds two connections in a worker (client and upstream), so
# worker_connections and the workers' open-files limit are raised to hold the largest N.
WORKER_CONNECTIONS=$((2 * MAX_N + 1024))
[ "$WORKER_CONNECTIONS" -le "$NOFILE" ] || WORKER_CONNECTIONS=$NOFILE
NGINX_SERVERS=$(for p in "${SIM_PORTS[@]}"; do printf 'server 127.0.0.1:%s; ' "$p"; done)
write_nginx() { # dir port
  cat >"$1/nginx.conf" <<EOF
worker_processes auto;
worker_rlimit_nofile $NOFILE;
daemon off;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections $WORKER_CONNECTIONS; multi_accept on; }
http {
  access_log off;
  client_body_temp_path $1/body;
  proxy_temp_path $1/proxy;
  fastcgi_temp_path $1/fastcgi;
  uwsgi_temp_path $1/uwsgi;
  scgi_temp_path $1/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 300s;
  server_tokens off;
  upstream sim { ${NGINX_SERVERS}keepalive 64; keepalive_requests 100000000; }
  server {
    listen 127.0.0.1:$2 backlog=4096;
    proxy_http_version 1.1;
    proxy_set_header Connection "";
    proxy_buffering off;
    proxy_read_timeout 300s;
    location /v1/ { proxy_pass http://sim; }
  }
}
EOF
}
# rein: per sim a provider, a passthrough route `sim-pt-I` and a checked route `sim-checked-I`
# (the client takes them in turn); clocks long enough for a HOLD-second stream, one attempt (a
# failure shows as one); max_connections above the largest N (the default is 4096); the sims
# spoken to in HTTP version $3 (http1 or http2).
write_rein() { # dir port http_version
  local long=$(((HOLD + 60) * 1000)) i mode release
  {
    cat <<EOF
[server]
listen = "127.0.0.1:$2"
drain_timeout_ms = 1000
max_connections = $((MAX_N + 1024))

[store]
sqlite_path = "$1/rein.sqlite"
EOF
    for i in $(seq 1 "$SIMS"); do
      cat <<EOF

[providers.sim-$i]
kind = "openai_compatible"
base_url = "http://127.0.0.1:${SIM_PORTS[$((i - 1))]}/v1"
http_version = "$3"
EOF
      for mode in pt checked; do
        release=""
        [ "$mode" = checked ] || release='release = "passthrough"'
        cat <<EOF

[routes.sim-$mode-$i]
$release
deadline_ms = $long
attempt_ms = $long
min_attempt_ms = 1000
first_token_ms = 30000
stream_idle_ms = 30000
attempts = 1
[[routes.sim-$mode-$i.tiers]]
name = "primary"
provider = "sim-$i"
model = "$SIM_MODEL"
EOF
      done
    done
  } >"$1/rein.toml"
}

# --- one measurement: a fresh proxy, idle RSS, N streams, verdicts -----------------------------
RAW="$TMP/raw.jsonl"
: >"$RAW"
measure() { # target n
  local target=$1 n=$2 dir port pid pids model idle out drops0 drops1 logs w sim0 simlogs
  dir="$TMP/$target-$n"
  mkdir -p "$dir"
  port=$(free_port)
  case "$target" in
    nginx)
      write_nginx "$dir" "$port"
      nginx -t -q -p "$dir" -c "$dir/nginx.conf" 2>"$dir/test.log" || { cat "$dir/test.log" >&2; die "nginx config"; }
      nginx -p "$dir" -c "$dir/nginx.conf" 2>>"$dir/stderr.log" &
      pid=$!
      model=$SIM_MODEL
      ;;
    rein-pt | rein-checked | rein-pt-h2 | rein-checked-h2)
      local version=http1
      [[ "$target" == *-h2 ]] && version=http2
      write_rein "$dir" "$port" "$version"
      RUST_LOG=${RUST_LOG:-warn,rein_gateway::server::chat=info} "$REIN_BIN" serve --config "$dir/rein.toml" >"$dir/stdout.log" 2>"$dir/stderr.log" &
      pid=$!
      local route=${target%-h2}
      model=$(for i in $(seq 1 "$SIMS"); do printf '%s-%s,' "${route/rein-/sim-}" "$i"; done)
      model=${model%,}
      ;;
    *) die "unknown target $target" ;;
  esac
  PIDS+=("$pid")
  wait_port "$port" "$target" "$pid"
  sleep 1
  pids=$pid
  if [ "$target" = nginx ]; then # master + workers
    w=""
    for _ in $(seq 1 50); do
      w=$(pgrep -P "$pid" | tr '\n' ' ' || true)
      [ -n "$w" ] && break
      sleep 0.1
    done
    [ -n "$w" ] || die "nginx has no workers"
    pids="$pid $w"
  fi
  # shellcheck disable=SC2086
  idle=$(rss_kib $pids)
  log "$target, N=$n: idle RSS $((idle / 1024)) MiB; opening $n streams over ${RAMP}s"
  drops0=$(listen_drops)
  sim0=$(cat "$TMP"/sim-*.log | wc -l)
  out=$(python3 "$LIB/streams_client.py" 127.0.0.1 "$port" "$model" "$n" --expect "$TMP/expect.txt" \
    --pids "$pids" --ramp "$RAMP" --procs "$CLIENT_PROCS" --timeout $((HOLD * 3 + 60)) --message "$MESSAGE") \
    || die "$target: client failed"
  drops1=$(listen_drops)
  stop "$pid"
  # What the sims logged meanwhile (they log only trouble).
  simlogs=$(cat "$TMP"/sim-*.log | tail -n +$((sim0 + 1)) | sed -E 's/^[^ ]+ +//; s/[0-9]+/N/g' | cut -c1-200 \
    | sort | uniq -c | sort -rn | head -4 || true)
  # What the proxy logged: rein's warn/error lines by message, nginx's error.log by message.
  if [ "$target" = nginx ]; then
    logs=$(sed -E 's/^[0-9/: ]+\[([a-z]+)\] [0-9#]+: \*?[0-9]* ?/\1 /; s/, client:.*//; s/[0-9]+/N/g' "$dir/error.log" 2>/dev/null \
      | sort | uniq -c | sort -rn | head -6 || true)
  else
    # Warnings, errors, and the reason of every call that was not answered.
    logs=$( (grep -hE ' (WARN|ERROR) ' "$dir/stdout.log" "$dir/stderr.log" 2>/dev/null \
      | sed -E 's/^[^ ]+ +(WARN|ERROR) /\1 /' || true
      grep -h 'call finished' "$dir/stderr.log" 2>/dev/null | grep -v 'outcome="answered"' \
      | sed -E 's/.*(outcome="[a-z_]+").*(reason=".*")$/call \1 \2/' || true) \
      | sed -E 's/[0-9]+/N/g' | cut -c1-200 | sort | uniq -c | sort -rn | head -6)
  fi
  python3 - "$target" "$n" "$idle" "$((drops1 - drops0))" "$logs" "$simlogs" "$out" >>"$RAW" <<'PY'
import json, sys
target, n, idle, drops, logs, simlogs, out = sys.argv[1:]
row = json.loads(out)
row.update(target=target, idle_rss_kib=int(idle), listen_drops=int(drops), proxy_log=logs,
           sim_log=simlogs)
print(json.dumps(row))
PY
  python3 - "$out" <<'PY' >&2
import json, sys
r = json.loads(sys.argv[1])
print(f"  whole {r['whole']}/{r['n']}, failed {r['failed']} {r['failures'] or ''}; opened in {r['opened_s']} s")
PY
}

for n in $NS; do
  for target in $TARGETS; do measure "$target" "$n"; done
done

# --- report ------------------------------------------------------------------------------------
mkdir -p "$(dirname "$OUT")"
machine="$(nproc) cores, $(awk -F': ' '/model name/ {print $2; exit}' /proc/cpuinfo), $(free -g | awk '/Mem:/ {print $2}') GiB, Linux $(uname -r)"
python3 "$LIB/streams_report.py" "$RAW" \
  --machine "$machine" \
  --rein "$("$REIN_BIN" --version 2>/dev/null || echo rein), $REIN_ORIGIN, work tree at $(cd "$ROOT" && git rev-parse --short HEAD 2>/dev/null || echo '?')$(cd "$ROOT" && git diff --quiet HEAD -- crates 2>/dev/null || echo ' + uncommitted changes')" \
  --tools "$(nginx -v 2>&1 | sed 's/^nginx version: //'), Python $(python3 -c 'import platform; print(platform.python_version())')" \
  --hold "$HOLD" --ramp "$RAMP" --tokens "$TOKENS" --delay-ms "$DELAY_MS" --procs "$CLIENT_PROCS" \
  --message-bytes "$MESSAGE_BYTES" --nofile "$NOFILE" --limits "$LIMITS" | tee "$OUT"
log "wrote ${OUT#"$ROOT"/}"
