#!/usr/bin/env bash
# The official Node SDK suite: builds `rein`, installs the pinned `openai`, `zod` and
# `@modelcontextprotocol/sdk` from tests/node/package-lock.json into tests/node/node_modules
# (gitignored; `npm ci` from the npm registry), and runs tests/node with Node's own test runner
# against a real `rein serve` (each test file starts it from $REIN_BIN). Needs Node.js 18 or later
# with npm: when `node` or `npm` is missing this installs Debian's `nodejs` and `npm` packages
# (through sudo when not root). mcp.test.mjs runs its upstream MCP servers
# (tests/python/mcp_upstream.py) on the Python suite's venv, $REIN_PYTHON or .venv/bin/python:
# scripts/test-python.sh makes it (scripts/test.sh runs that first).
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "error: the Node SDK suite needs Node.js 18+ and npm, and there is no apt-get to install" \
      "them: install Node.js" >&2
    exit 1
  fi
  echo "node or npm is missing: installing Debian's nodejs and npm packages" >&2
  sudo=()
  if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends nodejs npm
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 18 ]; then
  echo "error: the Node SDK suite needs Node.js 18 or later; this is $(node --version)" >&2
  exit 1
fi

cargo build -p rein
target_dir="${CARGO_TARGET_DIR:-target}"
case "$target_dir" in
  /*) ;;
  *) target_dir="$PWD/$target_dir" ;;
esac
export REIN_BIN="$target_dir/debug/rein"
if [ ! -x "$REIN_BIN" ]; then
  echo "error: cargo build -p rein left no binary at $REIN_BIN" >&2
  exit 1
fi

cd tests/node
# Three packages (about a hundred with the MCP SDK's dependencies): a clean install each run takes
# a few seconds (npm's cache keeps them).
npm ci --no-audit --no-fund --loglevel=error
exec node --test --test-concurrency=1
