#!/usr/bin/env bash
# Writes the seed inputs of the fuzz targets into fuzz/corpus/<target>/ from the repository's
# own samples: the providers' recorded SSE streams and JSON answers, the example configs and
# scenarios, and the tool URL templates they hold. Existing corpus files are kept; seeds are
# named `seed-*` so they are told apart from what the fuzzer found. The request parsers' seeds
# are the bodies the gateway's tests build (fuzz/seed_requests.py reads them out of the Rust
# sources), which needs python3.
#
# Run it from anywhere: bash fuzz/seed.sh. No environment variables.
set -euo pipefail
cd "$(dirname "$0")/.."

fixtures=crates/rein-providers/tests/fixtures
corpus=fuzz/corpus
mkdir -p "$corpus"/{openai_sse,anthropic_sse,openai_request,anthropic_request,json_repair,code_fence,config,url_template}

# An SSE target reads: one byte choosing the event limit, one byte counting the chunk lengths
# that follow, the lengths, then the body (fuzz/src/lib.rs). Each stream is seeded three ways:
# one byte at a time, in chunks of 1, 7 and 64 bytes, and in chunks of 5 under the 300-byte
# event limit.
sse_seeds() {
  local target=$1
  shift
  local file name
  for file in "$@"; do
    name=$(basename "$(dirname "$(dirname "$file")")")-$(basename "$file" .sse)
    { printf '\x00\x00'; cat "$file"; } >"$corpus/$target/seed-$name-bytewise"
    { printf '\x00\x03\x01\x07\x40'; cat "$file"; } >"$corpus/$target/seed-$name-chunks"
    { printf '\x03\x01\x05'; cat "$file"; } >"$corpus/$target/seed-$name-limit300"
  done
}
sse_seeds openai_sse "$fixtures"/openai/streams/*.sse "$fixtures"/openai/responses/streams/*.sse
# openai_sse also reads its body as a non-streaming answer: the recorded answers and the
# bench's, whole.
for file in "$fixtures"/openai/responses/*.json bench/lib/completion.json; do
  { printf '\x00\x00'; cat "$file"; } >"$corpus/openai_sse/seed-answer-$(basename "$file" .json)"
done
sse_seeds anthropic_sse "$fixtures"/anthropic/streams/*.sse

# Request bodies: the wire tests' for their own parser, the gateway tests' for both.
python3 fuzz/seed_requests.py crates/rein-gateway/src/wire/openai_tests.rs \
  "$corpus/openai_request" wire
python3 fuzz/seed_requests.py crates/rein-gateway/src/wire/anthropic_tests.rs \
  "$corpus/anthropic_request" wire
for file in crates/rein-gateway/tests/it/*.rs; do
  for target in openai_request anthropic_request; do
    python3 fuzz/seed_requests.py "$file" "$corpus/$target" "it-$(basename "$file" .rs)"
  done
done

# Answers to repair: the recorded JSON answers and error bodies as they are (the code-fence
# target fences them itself), and the shapes the repair tests name.
for file in "$fixtures"/{openai,anthropic,gemini}/{responses,errors}/*.json; do
  name=$(basename "$(dirname "$(dirname "$file")")")-$(basename "$file" .json)
  cp "$file" "$corpus/json_repair/seed-$name"
  cp "$file" "$corpus/code_fence/seed-$name"
done
printf '```json\n{"a": 1}\n```\nHope this helps!' >"$corpus/json_repair/seed-fenced-with-prose"
printf '{"a": "x}"}\nLet me know if you need anything else.' >"$corpus/json_repair/seed-trailing-prose"
printf '```\n{"a": [1, 2]}```' >"$corpus/json_repair/seed-bare-fence"
printf '```python\nprint(1)\n```' >"$corpus/json_repair/seed-other-language"
printf '{"a": 1}\n{"a": 2}' >"$corpus/json_repair/seed-two-values"
printf '{"order": {"id": 7, "items": [1.5, -2e3, null, true]}}\x01\nHope this helps!' \
  >"$corpus/code_fence/seed-with-prose"

# Configs: the examples, the simulator's scenarios (configs of another shape: the parser's
# errors) and the tools example.
for file in examples/*.toml crates/rein-sim/scenarios/*.toml crates/rein-tools/tools.example.toml; do
  cp "$file" "$corpus/config/seed-$(basename "$file" .toml)"
done

# URL templates: every `url = "http..."` in the configs, with an argument for each placeholder
# (a string, a number, and a value that must be refused).
n=0
grep -ho '^url = "http[^"]*"' examples/*.toml crates/rein-tools/tools.example.toml | sort -u |
  while IFS= read -r line; do
    template=${line#url = \"}
    template=${template%\"}
    args=$(grep -o '{[A-Za-z0-9_]*}' <<<"$template" | tr -d '{}' | sort -u || true)
    n=$((n + 1))
    {
      printf '%s\n' "$template"
      for arg in $args; do printf '%s=runbook restore/ü?&\n' "$arg"; done
    } >"$corpus/url_template/seed-$n-text"
    [ -n "$args" ] || continue
    {
      printf '%s\n' "$template"
      for arg in $args; do printf '%s=42\n@%s=..\n' "$arg" "$arg"; done
    } >"$corpus/url_template/seed-$n-number-context"
  done
printf 'http://127.0.0.1:9000/search/{q}/{p}?team={team}\nq=%%2e%%2E\np=..\nteam=7\n' \
  >"$corpus/url_template/seed-dots"
printf 'https://h/a/%%2E{x}{y}/b#{z}\nx=.\ny=true\nz={"a":1}\n' >"$corpus/url_template/seed-joined"

echo "seeded: $(find "$corpus" -type f | wc -l) files, $(du -sh "$corpus" | cut -f1)"
