#!/usr/bin/env bash
# Deletes what earlier runs left of the project's own crates in a reused cargo target directory.
#
#   bash scripts/prune-target.sh TARGET_DIR STAMP
#
# A build from a fresh clone rebuilds every crate of the workspace (and of fuzz/) it uses, so each
# of their artifacts that this run needed is newer than STAMP, a file touched before the run's
# first build. What is older belongs to earlier commits (another dependency set, other features)
# and is never read again: test binaries of several hundred MB each, which otherwise pile up run
# after run until the disk is full. Third-party artifacts are kept: a later run reuses them.
set -euo pipefail
cd "$(dirname "$0")/.."

target=${1:?usage: prune-target.sh TARGET_DIR STAMP}
stamp=${2:?usage: prune-target.sh TARGET_DIR STAMP}
[ -d "$target" ] && [ -e "$stamp" ] || exit 0

# The names the project's own artifacts start with: its packages' names and their targets' names,
# each as written and with '-' as '_' (rustc's crate names).
names=$(
  for manifest in Cargo.toml fuzz/Cargo.toml; do
    cargo metadata --no-deps --format-version 1 --offline --manifest-path "$manifest" 2>/dev/null || true
  done | python3 -c '
import json, sys
names = set()
for line in sys.stdin:
    if not line.strip():
        continue
    for package in json.loads(line)["packages"]:
        for name in [package["name"]] + [t["name"] for t in package["targets"]]:
            names.update({name, name.replace("-", "_")})
print("\n".join(sorted(names)))
'
)
[ -n "$names" ] || exit 0

before=$(du -sk "$target" | cut -f1)
while IFS= read -r deps; do
  while IFS= read -r name; do
    # `<name>-<hash>` binaries and dep-info, `lib<name>-<hash>.rlib` / `.rmeta`, object files.
    find "$deps" -maxdepth 1 -type f \( -name "${name}-*" -o -name "lib${name}-*" \) \
      ! -newer "$stamp" -delete
  done <<<"$names"
done < <(find "$target" -type d -name deps)
# Incremental state only serves the crate it was made for; CI builds without it.
find "$target" -maxdepth 4 -type d -name incremental -prune -exec rm -rf {} +
after=$(du -sk "$target" | cut -f1)
echo "prune-target: ${target##*/}: $(((before - after) / 1024)) MiB of earlier runs' artifacts deleted, $((after / 1024)) MiB kept" >&2
