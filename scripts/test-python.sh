#!/usr/bin/env bash
# The official-SDK suite: builds `rein`, makes a virtualenv at .venv (gitignored) with the pinned
# `openai`, `anthropic`, `pydantic`, `pydantic-ai-slim` and `pytest` from
# tests/python/requirements.txt, and runs tests/python against a real `rein serve` (the fixture
# starts it from $REIN_BIN).
# Needs only python3 with venv and PyPI; after the first install a run takes seconds.
set -euo pipefail
cd "$(dirname "$0")/.."

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

venv=.venv
# A venv whose interpreter no longer runs (python upgraded, copied tree) is made anew.
if ! "$venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$venv"
  python3 -m venv "$venv"
fi
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$venv/bin/python" -m pip install -q -r tests/python/requirements.txt

export PYTHONDONTWRITEBYTECODE=1
exec "$venv/bin/python" -m pytest tests/python -q
