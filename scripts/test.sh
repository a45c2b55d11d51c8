#!/usr/bin/env bash
# The test command: every Rust test, then the official-SDK suite against a real `rein serve`.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --workspace
bash scripts/test-python.sh
