"""Process helpers for the suite: `rein serve` started from `REIN_BIN` (used by conftest's session
gateway and by the MCP tests, which start their own), the upstream MCP servers of
`mcp_upstream.py` run with the tests' own interpreter, and an `mcp` SDK client pointed at rein's
`/mcp` with a bearer key.

- `start_rein(config_text, workdir, env_extra) -> (addr, process)`: writes `workdir/rein.toml`
  (`@SQLITE@` becomes `workdir/rein.sqlite`), starts `rein serve`, and waits for
  "rein listening on http://ADDR" on stdout; stderr goes to `workdir/rein.stderr`. `stop_rein`
  SIGTERMs and expects exit 0; `kill_rein` SIGKILLs. `ReinServer` wraps the three and restarts on
  the same config and SQLite file.
- `Upstream`: one `mcp_upstream.py` on a fixed port: start, stop (SIGTERM), kill (SIGKILL),
  restart on the SAME port, each start waiting until the port accepts connections; plus readers
  for its `ledger.jsonl` and `calls.jsonl`.
- `mcp_client(addr, key, mode)`: an `mcp.Client` for `http://ADDR/mcp` sending
  `Authorization: Bearer KEY`; `mode` "auto" (2026-07-28) or "legacy" (2025-11-25).

The `mcp` SDK is imported only inside the client helpers, so the rest of the suite does not load
it.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import anyio
import pytest

STARTUP_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
# Generous: the machine is busy (2 cores, builds running); each call should take well under a
# second.
MCP_CLIENT_TIMEOUT_S = 30

REIN_LISTENING_PREFIX = "rein listening on http://"
UPSTREAM_SCRIPT = Path(__file__).resolve().with_name("mcp_upstream.py")

T = TypeVar("T")


# ---------------------------------------------------------------------------------------------
# Small helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_accepts(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a TCP connection to host:port is accepted now."""
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def wait_until(
    check: Callable[[], T], what: str, timeout_s: float = STARTUP_TIMEOUT_S, interval_s: float = 0.05
) -> T:
    """Poll `check` until it returns something truthy, and return that; fail the test naming `what`
    after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


async def await_until(
    check: Callable[[], T], what: str, timeout_s: float = STARTUP_TIMEOUT_S, interval_s: float = 0.05
) -> T:
    """`wait_until` for async tests: polls without blocking the event loop, so calls in flight
    on it keep running."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            pytest.fail(f"timed out after {timeout_s}s waiting for {what}")
        await anyio.sleep(interval_s)


class LinePump:
    """Reads a process's stdout on a daemon thread: a process that never prints cannot hang the
    test, and the pipe never fills up. `None` in the queue means stdout closed."""

    def __init__(self, process: subprocess.Popen, name: str):
        self.lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                self.lines.put(line)
            self.lines.put(None)

        threading.Thread(target=pump, name=f"{name}-stdout", daemon=True).start()

    def wait_for(self, match: Callable[[str], T | None], timeout_s: float) -> tuple[str, T | None]:
        """The first line `match` accepts, as ("ok", value); or ("timeout"|"eof", None)."""
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                line = self.lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                return "timeout", None
            if line is None:
                return "eof", None
            value = match(line)
            if value is not None:
                return "ok", value


# ---------------------------------------------------------------------------------------------
# rein


def rein_bin() -> Path:
    """`REIN_BIN`, else `${CARGO_TARGET_DIR:-target}/debug/rein`; exits the session when absent."""
    configured = os.environ.get("REIN_BIN")
    if configured:
        path = Path(configured).resolve()
    else:
        root = Path(__file__).resolve().parents[2]
        path = Path(os.environ.get("CARGO_TARGET_DIR") or root / "target") / "debug" / "rein"
        if not path.is_absolute():
            path = root / path
    if not path.is_file():
        pytest.exit(f"no rein binary at {path}: run `cargo build -p rein` or set REIN_BIN", 2)
    return path


def rein_stderr_path(workdir: Path) -> Path:
    return workdir / "rein.stderr"


def _rein_fail(process: subprocess.Popen, workdir: Path, why: str) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()
    stderr_text = rein_stderr_path(workdir).read_text(errors="replace")
    pytest.fail(f"rein serve {why} (exit {process.returncode}); stderr:\n{stderr_text}")


def start_rein(
    config_text: str, workdir: Path, env_extra: Mapping[str, str] | None = None
) -> tuple[str, subprocess.Popen]:
    """Start `rein serve` on `config_text` in `workdir` and wait until it listens.

    `@SQLITE@` in the config becomes `workdir/rein.sqlite`, so a restart in the same workdir keeps
    the store. The environment is this process's plus `RUST_LOG=info` plus `env_extra` (key
    variables and the like). stderr is appended to `workdir/rein.stderr` (a restart keeps the
    earlier run's log above). Returns the `host:port` it printed and the process."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "rein.toml"
    config.write_text(config_text.replace("@SQLITE@", str(workdir / "rein.sqlite")))
    env = dict(os.environ)
    env["RUST_LOG"] = "info"
    env.update(env_extra or {})
    with open(rein_stderr_path(workdir), "ab") as stderr:
        process = subprocess.Popen(
            [str(rein_bin()), "serve", "--config", str(config)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            stdin=subprocess.DEVNULL,
            cwd=workdir,
            env=env,
            text=True,
        )
    pump = LinePump(process, "rein")

    def listening(line: str) -> str | None:
        if not line.startswith(REIN_LISTENING_PREFIX):
            return None
        return line[len(REIN_LISTENING_PREFIX) :].strip()

    outcome, addr = pump.wait_for(listening, STARTUP_TIMEOUT_S)
    if outcome == "timeout":
        _rein_fail(process, workdir, f"did not say it was listening within {STARTUP_TIMEOUT_S}s")
    if outcome == "eof":
        _rein_fail(process, workdir, "exited before it was listening")
    assert addr is not None
    return addr, process


def stop_rein(process: subprocess.Popen, workdir: Path) -> None:
    """SIGTERM, and fail unless rein exits 0 within `STOP_TIMEOUT_S`."""
    process.send_signal(signal.SIGTERM)
    try:
        code = process.wait(timeout=STOP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        _rein_fail(process, workdir, f"did not exit within {STOP_TIMEOUT_S}s of SIGTERM")
    if code != 0:
        _rein_fail(process, workdir, "did not exit cleanly after SIGTERM")


def kill_rein(process: subprocess.Popen) -> None:
    """SIGKILL: no drain, no shutdown work; what is in the SQLite file is all that survives."""
    if process.poll() is None:
        process.kill()
    process.wait()


class ReinServer:
    """One `rein serve` on a fixed config and workdir (so a fixed SQLite file): start, stop
    (SIGTERM, exit 0), kill (SIGKILL), restart. The listen address is `127.0.0.1:0`, so it changes
    on each start: read `addr` after a restart."""

    def __init__(self, config_text: str, workdir: Path, env_extra: Mapping[str, str] | None = None):
        self.config_text = config_text
        self.workdir = workdir
        self.env_extra = dict(env_extra or {})
        self.addr: str | None = None
        self.process: subprocess.Popen | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    @property
    def stderr_path(self) -> Path:
        return rein_stderr_path(self.workdir)

    def start(self) -> ReinServer:
        assert not self.running, "rein is already running"
        self.addr, self.process = start_rein(self.config_text, self.workdir, self.env_extra)
        return self

    def stop(self) -> None:
        assert self.process is not None
        stop_rein(self.process, self.workdir)

    def kill(self) -> None:
        assert self.process is not None
        kill_rein(self.process)

    def restart(self, *, hard: bool = True) -> ReinServer:
        """SIGKILL (or, with `hard=False`, a clean stop) and start again on the same config and
        SQLite file."""
        if self.running:
            self.kill() if hard else self.stop()
        return self.start()


# ---------------------------------------------------------------------------------------------
# Upstream MCP servers


class Upstream:
    """One `mcp_upstream.py --name NAME` on a fixed port (chosen once, kept across restarts) with
    its state in `state_dir`, run by this interpreter (`sys.executable`)."""

    def __init__(
        self,
        name: str,
        state_dir: Path,
        *,
        port: int | None = None,
        args: list[str] | None = None,
        env_extra: Mapping[str, str] | None = None,
    ):
        self.name = name
        self.state_dir = state_dir
        self.port = port or free_port()
        self.args = list(args or [])
        self.env_extra = dict(env_extra or {})
        self.process: subprocess.Popen | None = None
        state_dir.mkdir(parents=True, exist_ok=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def stderr_path(self) -> Path:
        return self.state_dir / "upstream.stderr"

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def _fail(self, why: str) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        stderr_text = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        pytest.fail(f"upstream {self.name} on port {self.port} {why}; stderr:\n{stderr_text}")

    def start(self) -> Upstream:
        """Start on `self.port` and return once it prints `ready` and the port accepts."""
        assert not self.running, f"upstream {self.name} is already running"
        command = [sys.executable, str(UPSTREAM_SCRIPT), "--name", self.name, "--port", str(self.port)]
        command += ["--state", str(self.state_dir), *self.args]
        env = dict(os.environ)
        env.update(self.env_extra)
        env["PYTHONUNBUFFERED"] = "1"
        with open(self.stderr_path, "ab") as stderr:
            self.process = subprocess.Popen(
                command,
                stdout=subprocess.PIPE,
                stderr=stderr,
                stdin=subprocess.DEVNULL,
                env=env,
                text=True,
            )
        pump = LinePump(self.process, f"upstream-{self.name}")
        outcome, _ = pump.wait_for(lambda line: line.strip() == "ready" or None, STARTUP_TIMEOUT_S)
        if outcome == "timeout":
            self._fail(f"did not print ready within {STARTUP_TIMEOUT_S}s")
        if outcome == "eof":
            self.process.wait()
            self._fail(f"exited before it was ready (exit {self.process.returncode})")
        wait_until(lambda: port_accepts(self.port), f"upstream {self.name} to accept on {self.port}")
        return self

    def stop(self) -> None:
        """SIGTERM (uvicorn drains for at most a second), SIGKILL if it lingers."""
        if not self.running:
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        wait_until(lambda: not port_accepts(self.port), f"upstream {self.name} to stop accepting")

    def kill(self) -> None:
        """SIGKILL: connections are reset, the port refuses at once."""
        if not self.running:
            return
        assert self.process is not None
        self.process.kill()
        self.process.wait()
        wait_until(lambda: not port_accepts(self.port), f"upstream {self.name} to stop accepting")

    def wait_exit(self, timeout_s: float = STARTUP_TIMEOUT_S) -> int:
        """Wait for the process to end on its own (a `--drop-after-commit` death); its exit code."""
        assert self.process is not None
        try:
            return self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self._fail(f"was expected to exit within {timeout_s}s")
            raise

    def restart(self) -> Upstream:
        """Stop if running (SIGKILL) and start again on the SAME port and state."""
        self.kill()
        return self.start()

    # State the server keeps in `state_dir`.

    def _lines(self, file: str) -> list[dict[str, Any]]:
        try:
            text = (self.state_dir / file).read_text(encoding="utf-8")
        except FileNotFoundError:
            return []
        # A line being written concurrently may be incomplete: only whole lines count.
        return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]

    def ledger(self, order_id: str | None = None) -> list[dict[str, Any]]:
        """`ledger.jsonl`: one line per refund EXECUTION; only `order_id`'s when given."""
        lines = self._lines("ledger.jsonl")
        return lines if order_id is None else [line for line in lines if line["order_id"] == order_id]

    def calls(self, tool: str | None = None) -> list[dict[str, Any]]:
        """`calls.jsonl`: one line per tool invocation as it started (tool, arguments, meta)."""
        lines = self._lines("calls.jsonl")
        return lines if tool is None else [line for line in lines if line["tool"] == tool]

    def arm_drop(self) -> None:
        """With `--drop-after-commit`: the next refund commits its ledger line and the server dies
        before answering (once: the server deletes the file)."""
        (self.state_dir / "drop-armed").touch()


# ---------------------------------------------------------------------------------------------
# MCP clients

MODE_PROTOCOL = {"auto": "2026-07-28", "legacy": "2025-11-25"}


@asynccontextmanager
async def open_mcp(
    url: str,
    headers: Mapping[str, str] | None = None,
    mode: str = "auto",
    timeout_s: float = MCP_CLIENT_TIMEOUT_S,
    **client_options: Any,
) -> AsyncIterator[Any]:
    """An entered `mcp.Client` for the Streamable HTTP endpoint `url`, sending `headers` on every
    HTTP request. The SDK's client-side response cache is off, so every list reaches the server.

    mcp 2.3.0 takes headers only through the HTTP client: an `httpx2.AsyncClient` (the SDK's own
    fork of httpx) given to `streamable_http_client(url, http_client=...)`, whose result is the
    `Transport` that `Client` accepts. The transport leaves a client it was given open, so it is
    closed here."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    timeout = httpx2.Timeout(timeout_s, read=max(timeout_s, 60))
    async with httpx2.AsyncClient(headers=dict(headers or {}), timeout=timeout) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(
            transport, mode=mode, cache=None, read_timeout_seconds=timeout_s, **client_options
        ) as client:
            yield client


def mcp_client(
    addr: str,
    key: str | None,
    mode: str = "auto",
    timeout_s: float = MCP_CLIENT_TIMEOUT_S,
    **client_options: Any,
):
    """`open_mcp` for rein's `http://ADDR/mcp` with `Authorization: Bearer KEY` (none when `key`
    is None); `mode` "auto" (negotiates 2026-07-28) or "legacy" (the 2025-11-25 handshake);
    `client_options` go to `mcp.Client` (an elicitation callback, its rounds)."""
    headers = {"Authorization": f"Bearer {key}"} if key is not None else {}
    return open_mcp(f"http://{addr}/mcp", headers, mode, timeout_s, **client_options)

