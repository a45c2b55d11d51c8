"""An upstream MCP server for the MCP suite, built on the `mcp` SDK's own `MCPServer` and served
over Streamable HTTP at `http://127.0.0.1:PORT/mcp` (the SDK answers both the 2026-07-28
per-request envelope and the legacy `initialize` handshake on that one endpoint). It prints `ready`
on stdout once it accepts connections.

    python mcp_upstream.py --name NAME --port PORT --state DIR
        [--drop-after-commit] [--slow-seconds S] [--token-env VAR]

Tools by `--name`:
- `orders`: `lookup_order` and `slow_lookup` (reads, `readOnlyHint`), `refund` (a write:
  `readOnlyHint` false, `destructiveHint` true).
- `billing`: `get_invoice` (a read) and `send_reminder` (no annotations at all, so MCP's defaults
  make it a write).

State in `--state DIR`:
- `calls.jsonl`: one line per tool invocation as it starts (tool, arguments, the request's
  `_meta`), so a test can see what reached the server and when a call is in flight.
- `ledger.jsonl`: one line per EXECUTION of `refund` (order_id, amount, key, refund_id), fsynced
  before the answer. A refund whose idempotency key (`_meta["io.rein/idempotency-key"]`) is already
  in the ledger returns the stored result and writes nothing, across restarts too.
- `drop-armed`: with `--drop-after-commit`, a refund that finds this file deletes it, commits its
  ledger line, then the process dies at once (`os._exit(1)`) before answering: the write happened,
  the response never leaves.

With `--token-env VAR`, every HTTP request must carry `X-Upstream-Token` equal to `$VAR` or it is
refused with 401 before the SDK sees it (the token is read from the environment, never argv).
"""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import os
import sys
import uuid
from pathlib import Path
from typing import Any, TypedDict

import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

IDEMPOTENCY_META_KEY = "io.rein/idempotency-key"
TOKEN_HEADER = "x-upstream-token"


class Order(TypedDict):
    order_id: str
    status: str
    served_by: str


class RefundResult(TypedDict):
    refund_id: str
    order_id: str
    amount: float


class Invoice(TypedDict):
    invoice_id: str
    total: float


class Reminder(TypedDict):
    invoice_id: str
    sent: bool


def append_line(path: Path, record: dict[str, Any]) -> None:
    """Append one JSON line and fsync it: once this returns, the line survives a crash."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_lines(path: Path) -> list[dict[str, Any]]:
    """Every complete JSON line of `path` (none when it does not exist)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def request_meta(ctx: Context) -> dict[str, Any]:
    """The `_meta` of the tools/call request being served (`{}` when it carried none).

    In mcp 2.x this is `ctx.request_context.meta`: the runner lifts `params._meta` off the raw
    request into an open TypedDict, so keys outside MCP's own (like rein's) survive as-is."""
    return dict(ctx.request_context.meta or {})


def build_server(args: argparse.Namespace) -> MCPServer:
    name: str = args.name
    state = Path(args.state)
    calls_path = state / "calls.jsonl"
    ledger_path = state / "ledger.jsonl"
    armed_path = state / "drop-armed"
    server = MCPServer(name, version="1.0.0")
    ledger_lock = asyncio.Lock()

    def record_call(tool: str, arguments: dict[str, Any], ctx: Context) -> None:
        meta = {
            k: v for k, v in request_meta(ctx).items() if not k.startswith("io.modelcontextprotocol/")
        }
        append_line(calls_path, {"tool": tool, "arguments": arguments, "meta": meta})

    def order(order_id: str) -> Order:
        return {"order_id": order_id, "status": "shipped", "served_by": name}

    if name == "orders":

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def lookup_order(order_id: str, ctx: Context) -> Order:
            """Look an order up by its id."""
            record_call("lookup_order", {"order_id": order_id}, ctx)
            return order(order_id)

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def slow_lookup(order_id: str, ctx: Context) -> Order:
            """Look an order up by its id, slowly."""
            record_call("slow_lookup", {"order_id": order_id}, ctx)
            await asyncio.sleep(args.slow_seconds)
            return order(order_id)

        @server.tool(annotations=ToolAnnotations(read_only_hint=False, destructive_hint=True))
        async def refund(order_id: str, amount: float, ctx: Context) -> RefundResult:
            """Refund an amount on an order. Executes at most once per idempotency key."""
            record_call("refund", {"order_id": order_id, "amount": amount}, ctx)
            key = request_meta(ctx).get(IDEMPOTENCY_META_KEY)
            async with ledger_lock:
                if key is not None:
                    for line in read_lines(ledger_path):
                        if line.get("key") == key:
                            return {
                                "refund_id": line["refund_id"],
                                "order_id": line["order_id"],
                                "amount": line["amount"],
                            }
                result: RefundResult = {
                    "refund_id": "rf-" + uuid.uuid4().hex[:12],
                    "order_id": order_id,
                    "amount": amount,
                }
                append_line(ledger_path, {**result, "key": key})
                if args.drop_after_commit and armed_path.exists():
                    # Disarm first so the next run answers normally, then die with the write
                    # committed and the answer never sent.
                    armed_path.unlink()
                    os._exit(1)
                return result

    elif name == "billing":

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        async def get_invoice(invoice_id: str, ctx: Context) -> Invoice:
            """Fetch an invoice by its id."""
            record_call("get_invoice", {"invoice_id": invoice_id}, ctx)
            return {"invoice_id": invoice_id, "total": 42.0}

        @server.tool()
        async def send_reminder(invoice_id: str, ctx: Context) -> Reminder:
            """Email the customer a payment reminder for an invoice."""
            record_call("send_reminder", {"invoice_id": invoice_id}, ctx)
            return {"invoice_id": invoice_id, "sent": True}

    else:
        raise SystemExit(f"unknown --name {name!r}: expected orders or billing")
    return server


def require_token(app, expected: str):
    """ASGI wrapper: refuse (401) any HTTP request whose `X-Upstream-Token` is not `expected`."""

    async def guarded(scope, receive, send):
        if scope["type"] == "http":
            given = dict(scope["headers"]).get(TOKEN_HEADER.encode(), b"")
            if not hmac.compare_digest(given, expected.encode()):
                body = b'{"error":"missing or wrong X-Upstream-Token"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 401,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", str(len(body)).encode()),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return guarded


async def serve(args: argparse.Namespace) -> None:
    server = build_server(args)
    app = server.streamable_http_app()
    if args.token_env:
        expected = os.environ.get(args.token_env)
        if not expected:
            raise SystemExit(f"--token-env {args.token_env}: the variable is not set")
        app = require_token(app, expected)
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=args.port,
        log_level="warning",
        # A client holding a stream open must not stall SIGTERM.
        timeout_graceful_shutdown=1,
    )
    http = uvicorn.Server(config)
    task = asyncio.create_task(http.serve())
    while not http.started:
        if task.done():
            await task  # re-raise why it stopped (e.g. the port is taken)
            raise SystemExit("uvicorn stopped before it was listening")
        await asyncio.sleep(0.02)
    print("ready", flush=True)
    await task


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, choices=["orders", "billing"])
    parser.add_argument("--port", type=int, help="serve Streamable HTTP on 127.0.0.1:PORT")
    parser.add_argument("--stdio", action="store_true", help="serve on stdin and stdout instead")
    parser.add_argument("--require-env", help="(stdio) exit at once unless this variable is set")
    parser.add_argument("--state", required=True, help="calls.jsonl, ledger.jsonl, drop-armed")
    parser.add_argument("--drop-after-commit", action="store_true")
    parser.add_argument("--slow-seconds", type=float, default=2.0)
    parser.add_argument("--token-env", help="require X-Upstream-Token equal to this variable's value")
    args = parser.parse_args()
    Path(args.state).mkdir(parents=True, exist_ok=True)
    if args.stdio:
        # A stdio server gets only what its client passes it: a secret it needs comes through
        # the client's environment for it.
        if args.require_env and not os.environ.get(args.require_env):
            raise SystemExit(f"--require-env {args.require_env}: the variable is not set")
        asyncio.run(build_server(args).run_stdio_async())
        return
    if args.port is None:
        parser.error("--port is required (or --stdio)")
    asyncio.run(serve(args))


if __name__ == "__main__":
    sys.exit(main())
