#!/usr/bin/env bash
# The test command: every Rust test, then the official-SDK suites (Python: scripts/test-python.sh;
# Node: scripts/test-node.sh, which installs Debian's nodejs and npm when they are missing)
# against a real `rein serve`.
# The Postgres tool store's tests start their own PostgreSQL server (rein_store::testing), which
# needs its server binaries (initdb, pg_ctl, postgres): when they are in none of the places those
# tests look, this installs Debian's `postgresql` package first (through sudo when not root).
# The Prometheus tests (crates/rein-gateway/tests/it/prometheus.rs) run `promtool` on the rules in
# deploy/prometheus and start a real `prometheus`: when either is not on PATH, this installs
# Debian's `prometheus` package the same way.
# The OTLP export tests send traces to a real Arize Phoenix: this makes a virtualenv at
# .venv-phoenix (gitignored) with the `arize-phoenix` pinned in tests/phoenix/requirements.txt
# (from PyPI, with python3's venv) and names its `phoenix` in REIN_PHOENIX_BIN.
# The dashboard's browser test
# (crates/rein-gateway/tests/it/dashboard.rs) loads the page in headless Chromium: when there is
# none ($CHROMIUM, /usr/bin/chromium, or `chromium` / `chromium-browser` on PATH), this installs
# Debian's `chromium` package the same way.
set -euo pipefail
cd "$(dirname "$0")/.."

# Install one of Debian's packages through apt-get (through sudo when not root).
apt_install() {
  local sudo=()
  if [ "$(id -u)" != 0 ]; then sudo=(sudo); fi
  "${sudo[@]}" apt-get update
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$1"
}

# The directory holding the server binaries, looked for where rein_store::testing looks:
# $REIN_POSTGRES_BINDIR, `pg_config --bindir`, Debian's /usr/lib/postgresql/<version>/bin
# (REIN_POSTGRES_DEBIAN_DIR moves that root, for this script's own test), then $PATH.
postgres_bindir() {
  local dirs=() dir
  if [ -n "${REIN_POSTGRES_BINDIR:-}" ]; then dirs+=("$REIN_POSTGRES_BINDIR"); fi
  if dir=$(pg_config --bindir 2>/dev/null); then dirs+=("$dir"); fi
  for dir in "${REIN_POSTGRES_DEBIAN_DIR:-/usr/lib/postgresql}"/*/bin; do dirs+=("$dir"); done
  IFS=: read -ra path_dirs <<<"${PATH:-}"
  dirs+=("${path_dirs[@]}")
  for dir in "${dirs[@]}"; do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ] && [ -x "$dir/postgres" ]; then
      echo "$dir"
      return 0
    fi
  done
  return 1
}

if ! postgres_bindir >/dev/null; then
  if ! command -v apt-get >/dev/null; then
    echo "error: the tests need PostgreSQL's server binaries (initdb, pg_ctl, postgres) and there" \
      "is no apt-get to install them: install PostgreSQL, or set REIN_POSTGRES_BINDIR to the" \
      "directory holding them" >&2
    exit 1
  fi
  echo "PostgreSQL's server binaries are missing: installing Debian's postgresql package" >&2
  apt_install postgresql
  if ! postgres_bindir >/dev/null; then
    echo "error: installed Debian's postgresql package, but initdb, pg_ctl and postgres are still" \
      "not found: set REIN_POSTGRES_BINDIR to the directory holding them" >&2
    exit 1
  fi
fi

# Whether promtool and prometheus are installed: on $PATH, or where Debian's package puts them.
prometheus_found() {
  local tool
  for tool in promtool prometheus; do
    if ! command -v "$tool" >/dev/null && ! [ -x "/usr/bin/$tool" ]; then return 1; fi
  done
}

if ! prometheus_found; then
  if ! command -v apt-get >/dev/null; then
    echo "error: the tests need Prometheus's promtool and prometheus and there is no apt-get to" \
      "install them: install Prometheus and put both on PATH" >&2
    exit 1
  fi
  echo "promtool or prometheus is missing: installing Debian's prometheus package" >&2
  apt_install prometheus
  if ! prometheus_found; then
    echo "error: installed Debian's prometheus package, but promtool and prometheus are still" \
      "not on PATH" >&2
    exit 1
  fi
fi

# Arize Phoenix for the OTLP tests (crates/rein-gateway/tests/it/phoenix.rs starts it). A venv
# whose `phoenix` cannot run (no such script, or an interpreter that no longer starts: python
# upgraded, copied tree) is made anew; pip then only checks the pin. (`phoenix --help` itself
# imports the whole server, a minute on a busy machine, so the interpreter is what is tried.)
# Without python3 the OTLP tests fail, saying REIN_PHOENIX_BIN is unset; the rest still run.
phoenix_venv=.venv-phoenix
if command -v python3 >/dev/null 2>&1; then
  if [ ! -x "$phoenix_venv/bin/phoenix" ] ||
    ! "$phoenix_venv/bin/python" -c 'import sys' >/dev/null 2>&1; then
    rm -rf "$phoenix_venv"
    python3 -m venv "$phoenix_venv"
  fi
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$phoenix_venv/bin/python" -m pip install -q \
    -r tests/phoenix/requirements.txt
  export REIN_PHOENIX_BIN="$PWD/$phoenix_venv/bin/phoenix"
else
  echo "warning: no python3 to install Arize Phoenix with: the OTLP tests will fail" >&2
fi

# Whether a Chromium is installed where the dashboard's browser test looks for one.
chromium_found() {
  if [ -n "${CHROMIUM:-}" ]; then [ -x "$CHROMIUM" ]; return; fi
  [ -x /usr/bin/chromium ] || command -v chromium >/dev/null || command -v chromium-browser >/dev/null
}

if ! chromium_found; then
  if ! command -v apt-get >/dev/null; then
    echo "error: the dashboard's browser test needs headless Chromium and there is no apt-get to" \
      "install it: install Chromium, or set CHROMIUM to its binary" >&2
    exit 1
  fi
  echo "Chromium is missing: installing Debian's chromium package" >&2
  apt_install chromium
  if ! chromium_found; then
    echo "error: installed Debian's chromium package, but /usr/bin/chromium is still missing:" \
      "set CHROMIUM to a Chromium binary" >&2
    exit 1
  fi
fi

cargo test --workspace
bash scripts/test-python.sh
bash scripts/test-node.sh
