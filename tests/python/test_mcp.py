"""MCP through rein's `/mcp` endpoint with the official `mcp` SDK (2.3.0): rein in front of two
upstream MCP servers (`mcp_upstream.py`, built on the same SDK): `orders` (`lookup_order`,
`slow_lookup`, `refund`) and `billing` (`get_invoice`, `send_reminder`).

Each test gets its own `rein serve` and its own `orders` server (tests kill it), so nothing one test
breaks (a dead server, an open breaker, a queued write) reaches another; `billing` is never killed
and is shared by the module.

rein's answer to every tools/call is an envelope in `structuredContent`: `status` ("ok", "refused",
"busy", "queued", "pending_approval"), `tool`, `result` (the upstream's structuredContent),
`degraded`, and as the case needs `fidelity`, `source`, `age_ms`, `detail`, `idempotency_key`,
`retry_after_ms`; `content[0]` says the same in words for the model; `isError` is true for refused
and busy. What is covered:
1. tools/list is the union of both servers (in both protocol modes): upstream tools as
   `{server}__{tool}`, except those an explicit `[tools.X]` ladder takes over, listed once as `X`;
   upstream descriptions, input schemas and annotations kept.
2. `lookup_order` answered live, then from rein's cache once the server is SIGKILLed: fast,
   degraded, stale, and the text says so.
3. Every rung dead: a refusal the model is told not to retry.
4. A full bulkhead: a second concurrent call is answered busy and never reaches the server.
5. Exactly once across a dropped answer: the server commits a refund and dies before answering;
   the client re-issues the same call (as MCP 2026-07-28 has clients do after a broken stream);
   rein recognises it, reuses the first idempotency key, and the ledger has ONE line.
6. A write while the server is down is queued, then replayed once when it is back.
7. A secret header rein sends upstream never appears in anything rein answers.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
import re
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from mcp import MCPError
from mcp.types import CallToolResult, Tool

from mcp_harness import MODE_PROTOCOL, ReinServer, Upstream, await_until, mcp_client, open_mcp

pytestmark = pytest.mark.anyio

MCP_CLIENT_KEY_ENV = "REIN_MCP_SUITE_CLIENT_KEY"
MCP_ADMIN_KEY_ENV = "REIN_MCP_SUITE_ADMIN_KEY"
MCP_CLIENT_KEY = "mcp-suite-client-key"
MCP_ADMIN_KEY = "mcp-suite-admin-key"

# The header rein sends the `orders` server in the secrets test, from an env var of rein's.
UPSTREAM_TOKEN_ENV = "ORDERS_TOKEN"
UPSTREAM_TOKEN = "sk-upstream-SECRET-123"

IDEMPOTENCY_META_KEY = "io.rein/idempotency-key"
# The envelope's provenance fields (rein_tools::PROVENANCE_FIELDS).
PROVENANCE_FIELDS = ("degraded", "fidelity", "source", "age_ms", "age_minutes", "detail")

# How long `slow_lookup` holds the orders bulkhead: well under the server's 5 s timeout, long
# enough that the second call is made while the first is surely still in flight.
SLOW_SECONDS = 3
# The outbox polls every 100 ms and backs off to at most 500 ms: a replay should land within a
# second or two; 30 s is for a busy machine.
REPLAY_TIMEOUT_S = 30
# After the one replay, long enough for several more outbox polls at the backoff cap: a second
# execution would have happened by then.
OUTBOX_SETTLE_S = 2

# `PORT_ORDERS` / `PORT_BILLING` are the upstreams' ports; `@ORDERS_HEADERS@` is a `headers_env`
# line for the secrets test (empty otherwise); `@SQLITE@` is filled in by `start_rein`.
CONFIG = f"""
[server]
listen = "127.0.0.1:0"
client_keys_env = ["{MCP_CLIENT_KEY_ENV}"]
admin_key_env = "{MCP_ADMIN_KEY_ENV}"

[store]
sqlite_path = "@SQLITE@"

[mcp]
list_ttl_ms = 60000

[mcp.servers.orders]
url = "http://127.0.0.1:PORT_ORDERS/mcp"
timeout_ms = 5000
@ORDERS_HEADERS@
[mcp.servers.billing]
url = "http://127.0.0.1:PORT_BILLING/mcp"
timeout_ms = 5000

[bulkheads.orders]
max_concurrent = 1
retry_after_ms = 500

[outbox]
poll_ms = 100
backoff_base_ms = 100
backoff_cap_ms = 500
# A write claimed by a rein that is then SIGKILLed waits out its lease before the restarted one
# claims it: longer than the refund rung's 3 s budget, so a live send is never taken over.
lease_ms = 5000

# An explicit ladder for one upstream tool: the server, then rein's cache.
[tools.lookup_order]
kind = "read"
[[tools.lookup_order.rungs]]
kind = "mcp"
source = "orders"
server = "orders"
timeout_ms = 3000
[[tools.lookup_order.rungs]]
kind = "cache"
source = "cache"
max_age_ms = 3600000

# The same upstream tool with no fallback at all: when the server is down, nothing answers.
[tools.lookup_order_bare]
kind = "read"
[[tools.lookup_order_bare.rungs]]
kind = "mcp"
source = "orders"
server = "orders"
tool = "lookup_order"
timeout_ms = 3000

# A write with the key guard and the outbox.
[tools.refund]
kind = "write"
idempotency = "key"
[[tools.refund.rungs]]
kind = "mcp"
source = "orders"
server = "orders"
timeout_ms = 3000
# Replays while the server is down open the breaker: a short cooldown lets the first replay after
# it is back go through in about a second rather than the default 30.
breaker = {{ failures = 5, cooldown_ms = 1000 }}
[[tools.refund.rungs]]
kind = "queue"
source = "outbox"
# A refund over 500 waits for a person, whatever else the call says.
[[tools.refund.gate]]
field = "amount"
op = ">"
value = 500
reason = "refunds over 500 need a person"
"""

# rein's tools/list with CONFIG: name -> (upstream server, upstream tool) it stands for.
EXPECTED_TOOLS = {
    "lookup_order": ("orders", "lookup_order"),
    "lookup_order_bare": ("orders", "lookup_order"),
    "refund": ("orders", "refund"),
    "orders__slow_lookup": ("orders", "slow_lookup"),
    "billing__get_invoice": ("billing", "get_invoice"),
    "billing__send_reminder": ("billing", "send_reminder"),
}

STATUSES = {"ok", "refused", "busy", "queued", "pending_approval"}


def rein_config(orders_port: int, billing_port: int, orders_token_env: str | None = None) -> str:
    headers = ""
    if orders_token_env:
        headers = f'headers_env = {{ "X-Upstream-Token" = "{orders_token_env}" }}\n'
    return (
        CONFIG.replace("PORT_ORDERS", str(orders_port))
        .replace("PORT_BILLING", str(billing_port))
        .replace("@ORDERS_HEADERS@\n", headers)
    )


@dataclass
class Stack:
    rein: ReinServer
    orders: Upstream
    billing: Upstream

    def client(self, mode: str = "auto", **client_options):
        """An `mcp.Client` on rein's `/mcp` with the suite's client key (an async context)."""
        assert self.rein.addr is not None
        return mcp_client(self.rein.addr, MCP_CLIENT_KEY, mode, **client_options)


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
def billing(tmp_path_factory: pytest.TempPathFactory):
    upstream = Upstream("billing", tmp_path_factory.mktemp("billing")).start()
    yield upstream
    upstream.stop()


@pytest.fixture
def make_stack(tmp_path, billing: Upstream):
    """Starts this test's `orders` server (with extra arguments) and a rein in front of it and the
    shared `billing`. At the end rein gets SIGTERM and must exit 0; `orders` is stopped."""
    made: list[Stack] = []

    def make(orders_args: list[str] | None = None, *, orders_token: bool = False) -> Stack:
        assert not made, "one stack per test"
        args = list(orders_args or [])
        upstream_env: dict[str, str] = {}
        rein_env = {MCP_CLIENT_KEY_ENV: MCP_CLIENT_KEY, MCP_ADMIN_KEY_ENV: MCP_ADMIN_KEY}
        if orders_token:
            args += ["--token-env", UPSTREAM_TOKEN_ENV]
            upstream_env[UPSTREAM_TOKEN_ENV] = UPSTREAM_TOKEN
            rein_env[UPSTREAM_TOKEN_ENV] = UPSTREAM_TOKEN
        orders = Upstream("orders", tmp_path / "orders", args=args, env_extra=upstream_env)
        config = rein_config(orders.port, billing.port, UPSTREAM_TOKEN_ENV if orders_token else None)
        rein = ReinServer(config, tmp_path / "rein", rein_env)
        made.append(Stack(rein=rein, orders=orders, billing=billing))
        orders.start()
        rein.start()
        return made[0]

    yield make
    for stack in made:
        try:
            if stack.rein.running:
                stack.rein.stop()
        finally:
            stack.orders.stop()


@pytest.fixture
def stack(make_stack) -> Stack:
    return make_stack()


# ---------------------------------------------------------------------------------------------
# Reading rein's answers


def dump(value: Any) -> str:
    return value.model_dump_json(by_alias=True, exclude_none=True)


def envelope(result: CallToolResult, tool: str) -> dict[str, Any]:
    """rein's envelope (the result's structuredContent), checked for the fields every answer has."""
    env = result.structured_content
    assert isinstance(env, dict), f"no envelope in structuredContent: {dump(result)}"
    assert env.get("status") in STATUSES, env
    assert env.get("tool") == tool, env
    assert isinstance(env.get("degraded"), bool), env
    is_error = env["status"] in ("refused", "busy")
    assert result.is_error is is_error, f"isError with status {env['status']}: {dump(result)}"
    return env


def text_of(result: CallToolResult) -> str:
    """The words rein put in `content[0]` for the model."""
    assert result.content, f"no content: {dump(result)}"
    block = result.content[0]
    assert block.type == "text", dump(result)
    return block.text


async def call(client, tool: str, arguments: dict[str, Any]) -> tuple[CallToolResult, dict, str]:
    """One tools/call: the result, its envelope, its text."""
    try:
        result = await client.call_tool(tool, arguments)
    except RuntimeError as exc:
        # The SDK client validates a non-error result's structuredContent against the tool's
        # listed outputSchema: an upstream outputSchema passed through unchanged rejects every
        # envelope.
        if "structured content" in str(exc):
            pytest.fail(
                f"the SDK client rejected rein's envelope for {tool}: {exc}. rein's tools/list must not "
                "advertise the upstream's outputSchema (its structuredContent is the envelope)"
            )
        raise
    return result, envelope(result, tool), text_of(result)


async def call_once(stack: Stack, tool: str, arguments: dict[str, Any]) -> CallToolResult | Exception:
    """One tools/call on a fresh connection; the exception instead when the client's own stream
    broke (in 2026-07-28 mode mcp 2.3.0 raises that out of the client's task group, closing the
    whole client, not just the call)."""
    try:
        async with stack.client() as client:
            return await client.call_tool(tool, arguments)
    except Exception as exc:
        if isinstance(exc, RuntimeError) and "structured content" in str(exc):
            raise
        return exc


async def list_tools(client) -> list[Tool]:
    tools: list[Tool] = []
    cursor = None
    while True:
        page = await client.list_tools(cursor=cursor)
        tools += page.tools
        cursor = page.next_cursor
        if not cursor:
            return tools


def hints(tool: Tool) -> dict[str, Any]:
    """A tool's annotations as sent (no annotations and an empty object mean the same)."""
    return tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}


def says_not_to_retry(text: str) -> bool:
    return re.search(r"\b(not|never|don't)\b[^.]*\bretry", text, re.IGNORECASE) is not None


def says_not_executed(text: str) -> bool:
    return re.search(r"\bnot\b[^.]*\bexecuted\b", text, re.IGNORECASE) is not None


def single_key(upstream: Upstream, order_id: str) -> str:
    """The one idempotency key every refund request for `order_id` carried to the server."""
    calls = [c for c in upstream.calls("refund") if c["arguments"]["order_id"] == order_id]
    keys = {c["meta"].get(IDEMPOTENCY_META_KEY) for c in calls}
    assert len(keys) == 1 and None not in keys, f"refund requests for {order_id} carried keys {keys}"
    return keys.pop()


# ---------------------------------------------------------------------------------------------
# 1. tools/list


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_tools_list_is_the_union_of_both_servers(stack: Stack, mode: str):
    upstream_tools: dict[str, dict[str, Tool]] = {}
    for upstream in (stack.orders, stack.billing):
        async with open_mcp(upstream.url, mode=mode) as direct:
            upstream_tools[upstream.name] = {t.name: t for t in await list_tools(direct)}

    async with stack.client(mode) as client:
        assert client.protocol_version == MODE_PROTOCOL[mode]
        listed = await list_tools(client)

    names = [t.name for t in listed]
    assert sorted(names) == sorted(EXPECTED_TOOLS), names
    for tool in listed:
        server, upstream_name = EXPECTED_TOOLS[tool.name]
        theirs = upstream_tools[server][upstream_name]
        assert tool.description == theirs.description, tool.name
        assert tool.input_schema == theirs.input_schema, tool.name
        assert hints(tool) == hints(theirs), tool.name
    by_name = {t.name: t for t in listed}
    assert hints(by_name["lookup_order"]) == {"readOnlyHint": True}
    assert hints(by_name["refund"]) == {"readOnlyHint": False, "destructiveHint": True}
    assert hints(by_name["billing__send_reminder"]) == {}


# ---------------------------------------------------------------------------------------------
# 2. the cache rung


async def test_lookup_order_answers_from_cache_once_the_server_is_killed(stack: Stack):
    arguments = {"order_id": "A-cache-1"}
    async with stack.client() as client:
        result, env, _ = await call(client, "lookup_order", arguments)
        assert env["status"] == "ok", dump(result)
        assert env["degraded"] is False
        live = {"order_id": "A-cache-1", "status": "shipped", "served_by": "orders"}
        assert env["result"] == live

        stack.orders.kill()
        started = time.monotonic()
        result, env, text = await call(client, "lookup_order", arguments)
        elapsed = time.monotonic() - started

    assert env["status"] == "ok", dump(result)
    assert env["degraded"] is True
    assert env["fidelity"] == "stale"
    assert env["source"] == "cache"
    assert isinstance(env.get("age_ms"), int | float) and env["age_ms"] >= 0, env
    assert env["result"] == live
    assert "cache" in text.lower(), text
    assert "current" in text.lower(), f"the text should say not to claim this is current: {text}"
    # The connection is refused at once: no waiting out the 3 s rung timeout.
    assert elapsed < 2.0, f"the cached answer took {elapsed:.2f}s"


# ---------------------------------------------------------------------------------------------
# 3. every rung dead


@pytest.mark.parametrize(
    "tool", ["lookup_order", "lookup_order_bare"], ids=["nothing-cached", "no-fallback"]
)
async def test_every_rung_dead_is_a_refusal_not_to_retry(stack: Stack, tool: str):
    async with stack.client() as client:
        # Live once, for other arguments: the cache holds an answer, just not for these.
        _, env, _ = await call(client, tool, {"order_id": "A-other"})
        assert env["status"] == "ok"

        stack.orders.kill()
        result, env, text = await call(client, tool, {"order_id": "A-never-seen"})

    assert env["status"] == "refused", dump(result)
    assert result.is_error is True
    assert env.get("result") is None, env
    assert says_not_to_retry(text), f"the text should tell the model not to retry: {text}"


# ---------------------------------------------------------------------------------------------
# 4. the bulkhead


async def test_full_bulkhead_answers_busy_and_runs_nothing(make_stack):
    stack = make_stack(["--slow-seconds", str(SLOW_SECONDS)])
    first: dict[str, Any] = {}
    async with stack.client() as holder, stack.client() as client:
        async with anyio.create_task_group() as tg:

            async def hold() -> None:
                first["answer"] = await call(holder, "orders__slow_lookup", {"order_id": "slow-1"})

            tg.start_soon(hold)
            await await_until(
                lambda: stack.orders.calls("slow_lookup") or "answer" in first,
                "the first slow_lookup to reach orders",
            )
            assert "answer" not in first, f"the first call never reached orders: {first['answer'][1]}"

            started = time.monotonic()
            result, env, _ = await call(client, "orders__slow_lookup", {"order_id": "slow-2"})
            elapsed = time.monotonic() - started
            assert "answer" not in first, "the bulkhead was full for the whole second call"

    assert env["status"] == "busy", dump(result)
    assert env["retry_after_ms"] == 500
    assert result.is_error is True
    assert elapsed < SLOW_SECONDS, f"busy took {elapsed:.2f}s: it waited for the slot"

    _, first_env, _ = first["answer"]
    assert first_env["status"] == "ok" and first_env["result"]["order_id"] == "slow-1"
    # Nothing ran for the refused call.
    assert [c["arguments"]["order_id"] for c in stack.orders.calls("slow_lookup")] == ["slow-1"]


# ---------------------------------------------------------------------------------------------
# 5. and 6. writes: exactly once


async def test_refund_is_executed_exactly_once_across_a_dropped_answer(make_stack):
    stack = make_stack(["--drop-after-commit"])
    order_id = "R-drop-1"
    arguments = {"order_id": order_id, "amount": 12.5}

    # The server commits the refund, then dies before answering.
    stack.orders.arm_drop()
    first = await call_once(stack, "refund", arguments)
    assert stack.orders.wait_exit() == 1
    assert len(stack.orders.ledger(order_id)) == 1, "the refund committed before the server died"

    keys = []
    if isinstance(first, CallToolResult):
        env = envelope(first, "refund")
        # rein cannot know whether the refund ran.
        assert env["status"] == "queued", dump(first)
        assert env.get("outcome_unknown") is True, env
        assert env.get("idempotency_key"), env
        keys.append(env["idempotency_key"])
    # else: the client's own stream broke; it re-issues all the same.

    stack.orders.start()
    # The client re-issues the same call: same arguments, a new request, no key of its own. rein
    # recognises it and reuses the first key; the outbox replays with that key too.
    deadline = time.monotonic() + REPLAY_TIMEOUT_S
    while True:
        again = await call_once(stack, "refund", arguments)
        assert isinstance(again, CallToolResult), f"the re-issued call failed: {again!r}"
        env = envelope(again, "refund")
        assert env["status"] in ("queued", "ok"), dump(again)
        assert env.get("idempotency_key"), env
        keys.append(env["idempotency_key"])
        if env["status"] == "ok":
            break
        assert time.monotonic() < deadline, f"the re-issue was still queued after {REPLAY_TIMEOUT_S}s"
        await anyio.sleep(0.2)

    await anyio.sleep(OUTBOX_SETTLE_S)
    ledger = stack.orders.ledger(order_id)
    assert len(ledger) == 1, f"the refund executed {len(ledger)} times: {ledger}"
    assert len(set(keys)) == 1, f"the re-issue got a new idempotency key: {keys}"
    assert env["result"] == {"refund_id": ledger[0]["refund_id"], "order_id": order_id, "amount": 12.5}
    single_key(stack.orders, order_id)


async def test_refund_while_the_server_is_down_is_queued_then_replayed_once(stack: Stack):
    order_id = "R-queued-1"
    stack.orders.stop()
    async with stack.client() as client:
        result, env, text = await call(client, "refund", {"order_id": order_id, "amount": 7.0})

    assert env["status"] == "queued", dump(result)
    assert env["degraded"] is True
    assert env.get("idempotency_key"), env
    assert says_not_executed(text), f"the text should say the refund has not executed yet: {text}"

    stack.orders.start()
    await await_until(
        lambda: stack.orders.ledger(order_id), "the outbox to replay the refund", REPLAY_TIMEOUT_S
    )
    await anyio.sleep(OUTBOX_SETTLE_S)
    ledger = stack.orders.ledger(order_id)
    assert len(ledger) == 1, f"the refund executed {len(ledger)} times: {ledger}"
    assert ledger[0]["amount"] == 7.0
    single_key(stack.orders, order_id)


# ---------------------------------------------------------------------------------------------
# 7. secrets


async def test_upstream_token_never_appears_in_an_answer(make_stack):
    stack = make_stack(orders_token=True)
    # The control: `orders` refuses a client without the token, so a listed or answered orders
    # tool below means rein sent it.
    with pytest.raises(Exception):
        async with open_mcp(stack.orders.url) as direct:
            await direct.list_tools()

    answers: list[str] = []

    async def keep(make_answer) -> Any:
        try:
            answer = await make_answer()
        except MCPError as exc:
            answers.append(str(exc) + dump(exc.error))
            return None
        answers.append(dump(answer))
        return answer

    for mode in ("auto", "legacy"):
        async with stack.client(mode) as client:
            listed = await keep(lambda: client.list_tools())
            assert {"lookup_order", "refund", "orders__slow_lookup"} <= {t.name for t in listed.tools}
            answer = await keep(lambda: client.call_tool("lookup_order", {"order_id": f"S-{mode}"}))
            env = envelope(answer, "lookup_order")
            assert env["status"] == "ok" and env["degraded"] is False, env
            assert env["result"]["served_by"] == "orders"
            # An upstream error (a required argument missing) and a refusal are where a gateway
            # tends to echo what it sent.
            await keep(lambda: client.call_tool("orders__slow_lookup", {}))
    stack.orders.kill()
    async with stack.client() as client:
        refused = await keep(lambda: client.call_tool("lookup_order_bare", {"order_id": "S-down"}))
        assert envelope(refused, "lookup_order_bare")["status"] == "refused"

    for answer in answers:
        assert UPSTREAM_TOKEN not in answer, answer
        assert "SECRET" not in answer, answer


# ---------------------------------------------------------------------------------------------
# 8. rein killed (SIGKILL) at seeded points while writes wait in the outbox


def assert_executed_once(upstream: Upstream, order_id: str) -> None:
    """The server's own ledger: exactly one execution of the refund for `order_id`."""
    ledger = upstream.ledger(order_id)
    assert len(ledger) == 1, f"the refund for {order_id} executed {len(ledger)} times: {ledger}"


@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_rein_killed_mid_outbox_loses_nothing_and_doubles_nothing(make_stack, seed: int):
    """Writes queued while the server is down; the server comes back and rein is SIGKILLed at a
    point drawn from `seed` (before, during or after the replay); rein restarted on the same
    SQLite file finishes the rest. Every refund executes exactly once."""
    rng = random.Random(seed)
    stack = make_stack()
    orders = [f"R-kill-{seed}-{i}" for i in range(3)]
    stack.orders.stop()
    async with stack.client() as client:
        for order_id in orders:
            _, env, _ = await call(client, "refund", {"order_id": order_id, "amount": 1.0})
            # The replay worker may hold the server's one bulkhead slot: busy says when to retry.
            while env["status"] == "busy":
                await anyio.sleep(env["retry_after_ms"] / 1000)
                _, env, _ = await call(client, "refund", {"order_id": order_id, "amount": 1.0})
            assert env["status"] == "queued", env

    stack.orders.start()
    # The kill lands somewhere in the first replay passes (poll 100 ms, backoff up to 500 ms).
    await anyio.sleep(rng.uniform(0.0, 0.8))
    stack.rein.kill()
    stack.rein.start()

    await await_until(
        lambda: all(stack.orders.ledger(o) for o in orders),
        "the restarted rein to replay every refund",
        REPLAY_TIMEOUT_S,
    )
    await anyio.sleep(OUTBOX_SETTLE_S)
    for order_id in orders:
        assert_executed_once(stack.orders, order_id)
        single_key(stack.orders, order_id)


# ---------------------------------------------------------------------------------------------
# 9. the checks above go red when the guarantee is gone


async def test_the_ledger_check_catches_a_replay_under_a_fresh_key(stack: Stack):
    """What a replay that minted a new key would do (send the refund again under another key):
    the server runs it again, and the exactly-once check above fails."""
    order_id = "R-fresh-key"
    arguments = {"order_id": order_id, "amount": 3.0}
    async with stack.client() as client:
        _, env, _ = await call(client, "refund", arguments)
    assert env["status"] == "ok", env
    assert_executed_once(stack.orders, order_id)

    async with open_mcp(stack.orders.url) as direct:
        await direct.call_tool("refund", arguments, meta={IDEMPOTENCY_META_KEY: "a-fresh-key"})
    with pytest.raises(AssertionError, match="executed 2 times"):
        assert_executed_once(stack.orders, order_id)


def provenance_problems(env: dict[str, Any], text: str) -> list[str]:
    """What a cached answer must carry for the model to honour it (empty when all is there)."""
    problems = []
    if env.get("degraded") is not True:
        problems.append("not marked degraded")
    if env.get("fidelity") != "stale":
        problems.append("no stale fidelity")
    if env.get("source") != "cache":
        problems.append("no source")
    if not isinstance(env.get("age_ms"), int):
        problems.append("no age")
    if "current" not in (env.get("detail") or "").lower() or "cache" not in text.lower():
        problems.append("no words saying it may not be current")
    return problems


async def test_the_provenance_check_fails_an_answer_without_it(stack: Stack):
    arguments = {"order_id": "A-provenance"}
    async with stack.client() as client:
        await call(client, "lookup_order", arguments)
        stack.orders.kill()
        _, env, text = await call(client, "lookup_order", arguments)
    assert provenance_problems(env, text) == []

    stripped = {k: v for k, v in env.items() if k not in PROVENANCE_FIELDS}
    assert len(provenance_problems(stripped, json.dumps(stripped))) == 5


# ---------------------------------------------------------------------------------------------
# 10. a gated write: held for a person, in the current revision's input round


def admin(stack: Stack, method: str, path: str, body: dict | None = None) -> dict:
    """rein's admin API, as the person who decides holds."""
    request = urllib.request.Request(
        f"http://{stack.rein.addr}{path}",
        method=method,
        data=None if body is None else json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {MCP_ADMIN_KEY}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())


async def test_a_gated_refund_waits_for_a_person_and_then_runs_once(stack: Stack):
    from mcp.client import InputRequiredRoundsExceededError
    from mcp.types import ElicitRequestURLParams, ElicitResult

    order_id = "R-gated-1"
    arguments = {"order_id": order_id, "amount": 900.0}
    asked: list[ElicitRequestURLParams] = []

    async def accept_without_deciding(_context, params):
        # The client (and so the model) saying yes approves nothing.
        asked.append(params)
        return ElicitResult(action="accept")

    async with stack.client(elicitation_callback=accept_without_deciding, input_required_max_rounds=3) as client:
        with pytest.raises(InputRequiredRoundsExceededError):
            await client.call_tool("refund", arguments)
    assert len(asked) == 3 and all(isinstance(p, ElicitRequestURLParams) for p in asked), asked
    assert stack.orders.ledger(order_id) == [], "a held refund must not run"
    assert "refunds over 500 need a person" in asked[0].message, asked[0].message
    # The link is the hold, as the person deciding sees it: the exact call.
    path = asked[0].url.split(stack.rein.addr, 1)[1]
    hold = admin(stack, "GET", path)["hold"]
    assert hold["state"] == "pending" and hold["tool"] == "refund", hold
    assert hold["args"] == arguments, hold

    decided: list[str] = []

    async def person_approves(_context, params):
        path = params.url.split(stack.rein.addr, 1)[1]
        decided.append(admin(stack, "GET", path)["hold"]["state"])
        if decided[-1] == "pending":
            admin(stack, "POST", path + "/approve", {"by": "ops"})
        return ElicitResult(action="accept")

    async with stack.client(elicitation_callback=person_approves) as client:
        result = await client.call_tool("refund", arguments)
    env = envelope(result, "refund")
    assert decided == ["pending"], decided
    # Approved: queued under the held call's key, to run once.
    assert env["status"] == "queued", dump(result)
    assert env["idempotency_key"] == hold["idempotency_key"], env
    await await_until(lambda: stack.orders.ledger(order_id), "the approved refund to run", REPLAY_TIMEOUT_S)

    async with stack.client() as client:
        _, env, _ = await call(client, "refund", arguments)
    assert env["status"] == "ok", env
    assert env["result"]["order_id"] == order_id
    await anyio.sleep(OUTBOX_SETTLE_S)
    assert_executed_once(stack.orders, order_id)
    single_key(stack.orders, order_id)


async def test_a_held_call_is_bound_to_its_exact_arguments(stack: Stack):
    """The retry's requestState carries the held call's key: with other arguments it is refused,
    and nothing runs."""
    arguments = {"order_id": "R-gated-2", "amount": 800.0}
    async with stack.client(mode="legacy") as client:
        # The previous revision has no input rounds: the hold is the answer.
        result, env, text = await call(client, "refund", arguments)
    assert env["status"] == "pending_approval", dump(result)
    assert result.is_error is False
    assert isinstance(env.get("hold_id"), int) and env.get("idempotency_key"), env
    assert says_not_executed(text), text
    key = env["idempotency_key"]

    async with stack.client() as client:
        other = {"order_id": "R-gated-2", "amount": 100.0}
        result = await client.call_tool("refund", other, request_state=f"rein-hold:{key}")
        env = envelope(result, "refund")
        assert env["status"] == "refused", dump(result)
        forged = await client.call_tool("refund", arguments, request_state="not-reins")
        assert envelope(forged, "refund")["status"] == "refused", dump(forged)
    assert stack.orders.ledger("R-gated-2") == []


# ---------------------------------------------------------------------------------------------
# 11. a stdio server


async def test_a_stdio_server_is_listed_and_called_with_its_secret_from_the_environment(tmp_path):
    """rein starts the server itself (`command`), passing it only the variables `env_from`
    names: the server refuses to start without its token, and the token is in no answer."""
    upstream = Path(__file__).with_name("mcp_upstream.py")
    state = tmp_path / "stdio-orders"
    config = f"""
[server]
listen = "127.0.0.1:0"
client_keys_env = ["{MCP_CLIENT_KEY_ENV}"]

[store]
sqlite_path = "{tmp_path / "rein.sqlite"}"

[mcp.servers.local]
command = {json.dumps(sys.executable)}
args = [{json.dumps(str(upstream))}, "--stdio", "--name", "orders", "--state", {json.dumps(str(state))}, "--require-env", "{UPSTREAM_TOKEN_ENV}"]
env_from = {{ {UPSTREAM_TOKEN_ENV} = "{UPSTREAM_TOKEN_ENV}" }}
timeout_ms = 10000
connect_timeout_ms = 20000
"""
    rein = ReinServer(
        config, tmp_path / "rein", {MCP_CLIENT_KEY_ENV: MCP_CLIENT_KEY, UPSTREAM_TOKEN_ENV: UPSTREAM_TOKEN}
    ).start()
    try:
        async with mcp_client(rein.addr, MCP_CLIENT_KEY) as client:
            names = sorted(t.name for t in await list_tools(client))
            assert names == ["local__lookup_order", "local__refund", "local__slow_lookup"], names
            result, env, _ = await call(client, "local__lookup_order", {"order_id": "S-1"})
            assert env["status"] == "ok" and env["degraded"] is False, dump(result)
            assert env["result"]["order_id"] == "S-1"
            refund, env, _ = await call(client, "local__refund", {"order_id": "S-2", "amount": 2.0})
            assert env["status"] == "ok", dump(refund)
            assert "SECRET" not in dump(result) + dump(refund)
        ledger = [json.loads(line) for line in (state / "ledger.jsonl").read_text().splitlines()]
        assert [entry["order_id"] for entry in ledger] == ["S-2"]
        assert ledger[0]["key"] == env["idempotency_key"], "the key reaches a stdio server too"
    finally:
        rein.stop()
