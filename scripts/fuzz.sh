#!/usr/bin/env bash
# Builds rein's fuzz targets (fuzz/, cargo-fuzz + libFuzzer) once and runs each for a bounded
# time, as many at once as there are cores (each libFuzzer run uses one), from the committed
# corpus (fuzz/corpus/<target>) with the shared dictionary (fuzz/dict). Exits non-zero when any target crashed, naming the target
# and the input that crashed it (libFuzzer writes it under fuzz/artifacts/<target>/).
#
#   bash scripts/fuzz.sh          # 30 s per target
#   bash scripts/fuzz.sh 600      # 10 minutes per target
#
# Arguments and environment:
#   $1 / FUZZ_SECONDS  seconds per target (default 30)
#   FUZZ_TARGETS       space-separated targets to run (default: all of them)
#   FUZZ_JOBS          targets run at once (default: the cores, `nproc`)
#   FUZZ_CORPUS_OUT    a directory to keep what the run adds to each corpus in (as
#                      <dir>/<target>/); by default new inputs go to a temporary directory and
#                      are dropped. Fold them into fuzz/corpus with `cargo fuzz cmin` (see
#                      fuzz/README.md).
#   FUZZ_BUILD         `dev` (default: no optimization, quickest to build) or `release`
#                      (optimized: several times more executions a second, much longer build)
#   CARGO_TARGET_DIR   where to build (default ~/.cache/rein-fuzz-target, outside the clone,
#                      so it can be reused between runs)
#
# cargo-fuzz needs nightly Rust: the nightly toolchain when rustup has one, otherwise the pinned
# toolchain of rust-toolchain.toml with RUSTC_BOOTSTRAP=1 (libFuzzer's coverage instrumentation
# needs no nightly-only flag without a sanitizer). No sanitizer is used (`-s none`): the fuzzed
# crates have no unsafe code for AddressSanitizer to watch (rein's only unsafe code, the global
# allocator in crates/rein-alloc, is not linked into the targets), and its runtime would need
# nightly. cargo-fuzz itself is installed (a pinned version, with `cargo install --locked`) when
# missing, and libFuzzer's C++ part needs a C++ compiler (Debian's g++, installed through
# apt-get when missing).
set -euo pipefail
corpus_out=${FUZZ_CORPUS_OUT:+$(realpath -m "$FUZZ_CORPUS_OUT")}
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds=${1:-${FUZZ_SECONDS:-30}}
build=${FUZZ_BUILD:-dev}
jobs=${FUZZ_JOBS:-$(nproc)}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HOME}/.cache/rein-fuzz-target}"
export CARGO_TERM_COLOR=never

log() { printf '[fuzz %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

case "$seconds" in
  '' | *[!0-9]*) log "seconds per target must be a whole number, not '$seconds'"; exit 2 ;;
esac
case "$jobs" in
  '' | *[!0-9]* | 0) log "FUZZ_JOBS must be a whole number above 0, not '$jobs'"; exit 2 ;;
esac
case "$build" in
  dev) build_flags=(--dev) ;;
  release) build_flags=(--release) ;;
  *) log "FUZZ_BUILD must be dev or release, not '$build'"; exit 2 ;;
esac

if ! command -v c++ >/dev/null; then
  sudo=()
  if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++
fi

pinned=$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)
if rustup toolchain list | grep -q '^nightly-'; then
  toolchain=nightly
else
  toolchain=$pinned
  export RUSTC_BOOTSTRAP=1
fi
cargo_fuzz=(cargo "+$toolchain" fuzz)

if ! cargo fuzz --version 2>/dev/null | grep -q " $CARGO_FUZZ_VERSION\$"; then
  log "installing cargo-fuzz $CARGO_FUZZ_VERSION"
  cargo "+$pinned" install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

log "building the fuzz targets ($build, toolchain $toolchain)"
started=$(date +%s)
(cd fuzz && "${cargo_fuzz[@]}" build -s none "${build_flags[@]}" --target-dir "$CARGO_TARGET_DIR")
log "built in $(($(date +%s) - started)) s"

all_targets=$(cd fuzz && "${cargo_fuzz[@]}" list)
targets=${FUZZ_TARGETS:-$all_targets}

for target in $targets; do
  if ! grep -qx "$target" <<<"$all_targets"; then
    log "no fuzz target named $target (there are: $(tr '\n' ' ' <<<"$all_targets"))"
    exit 2
  fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One target's run; its exit status goes to $work/<target>.status, its output to .log.
fuzz_one() {
  local target=$1 out="$work/corpus/$1" status=0
  if [ -n "$corpus_out" ]; then out="$corpus_out/$target"; fi
  mkdir -p "$out" "fuzz/artifacts/$target" "fuzz/corpus/$target"
  # The first corpus directory receives new inputs; the committed corpus is only read.
  (cd fuzz && "${cargo_fuzz[@]}" run -s none "${build_flags[@]}" --target-dir "$CARGO_TARGET_DIR" \
    "$target" "$out" "corpus/$target" -- \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -dict=dict \
    -artifact_prefix="artifacts/$target/" -print_final_stats=1) \
    >"$work/$target.log" 2>&1 || status=$?
  echo "$status" >"$work/$target.status"
}

log "running $(wc -w <<<"$targets") targets for $seconds s each, $jobs at once"
running=0
for target in $targets; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  log "running $target for $seconds s"
  fuzz_one "$target" &
  running=$((running + 1))
done
wait || true

crashed=()
for target in $targets; do
  status=$(cat "$work/$target.status" 2>/dev/null || echo "no status")
  grep -E '^(stat::number_of_executed_units|stat::peak_rss_mb|#[0-9]+ +DONE)' \
    "$work/$target.log" | sed "s/^/[fuzz] $target: /" >&2 || true
  if [ "$status" != 0 ]; then
    artifact=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$work/$target.log" | tail -1)
    tail -40 "$work/$target.log" >&2
    log "$target FAILED (exit $status): ${artifact:+fuzz/$artifact}"
    crashed+=("$target: ${artifact:+fuzz/$artifact}")
  fi
done

if [ ${#crashed[@]} -gt 0 ]; then
  log "crashes:"
  printf '  %s\n' "${crashed[@]}" >&2
  log "reproduce one with: cd fuzz && cargo +$toolchain fuzz run -s none ${build_flags[*]} <target> <artifact>"
  exit 1
fi
log "no crash in $(wc -w <<<"$targets") targets x $seconds s"
