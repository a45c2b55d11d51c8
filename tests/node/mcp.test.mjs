// MCP through rein's `/mcp` endpoint with the official TypeScript SDK (`@modelcontextprotocol/sdk`
// 1.32.2: `Client` over `StreamableHTTPClientTransport`): rein in front of two upstream MCP servers,
// `tests/python/mcp_upstream.py` (built on the Python SDK) run as `orders` (`lookup_order`,
// `slow_lookup`, `refund`) and `billing` (`get_invoice`, `send_reminder`). The same scenarios as
// tests/python/test_mcp.py, seen from the other SDK: that one negotiates MCP 2026-07-28, this one
// the `initialize` handshake of the revision before (2025-11-25); rein serves both.
//
// Each test gets its own `rein serve` and its own `orders` server (tests kill it), cleaned up in
// the test's `after`; `billing` is never killed and is shared by the file. The upstreams run on
// the Python suite's venv (`REIN_PYTHON`, default `<repo>/.venv/bin/python`, made by
// scripts/test-python.sh with the `mcp` package).
//
// rein's answer to every tools/call is an envelope in `structuredContent`: `status` ("ok",
// "refused", "busy", "queued", "pending_approval"), `tool`, `result`, `degraded`, and as the case
// needs `fidelity`, `source`, `age_ms`, `idempotency_key`, `retry_after_ms`; `content[0]` says the
// same in words for the model; `isError` is true for refused and busy. What is covered:
// 1. tools/list is the union of both servers, with the protocol version the SDK negotiated.
// 2. `lookup_order` answered live, then from rein's cache once `orders` is SIGKILLed: fast,
//    degraded, stale, and the text says so.
// 3. Every rung dead: a refusal the model is told not to retry.
// 4. A full bulkhead: a second concurrent call is answered busy and never reaches the server.
// 5. A `refund` while `orders` is down is queued, then replayed exactly once when it is back.
// 6. No client key: rein answers 401 and the SDK's connect throws.

import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import net from "node:net";
import { tmpdir } from "node:os";
import path from "node:path";
import { createInterface } from "node:readline";
import { setTimeout as sleep } from "node:timers/promises";
import { fileURLToPath } from "node:url";
import { after, before, test } from "node:test";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport, StreamableHTTPError } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
const UPSTREAM_SCRIPT = path.join(ROOT, "tests", "python", "mcp_upstream.py");

const CLIENT_KEY_ENV = "REIN_MCP_NODE_SUITE_CLIENT_KEY";
const ADMIN_KEY_ENV = "REIN_MCP_NODE_SUITE_ADMIN_KEY";
const CLIENT_KEY = "mcp-node-suite-client-key";
const ADMIN_KEY = "mcp-node-suite-admin-key";
const IDEMPOTENCY_META_KEY = "io.rein/idempotency-key";

// Generous: the machine is busy (2 cores, builds running); each call should take well under a
// second, a process start a few.
const STARTUP_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;
const CALL_TIMEOUT_MS = 30_000;
const TEST_TIMEOUT_MS = 180_000;
// How long `slow_lookup` holds the orders bulkhead: well under the server's 5 s timeout, long
// enough that the second call is made while the first is surely still in flight.
const SLOW_SECONDS = 3;
// The outbox polls every 100 ms and backs off to at most 500 ms; the replays that fail while
// `orders` is down open the rung's breaker, whose cooldown the config sets to 1 s. 30 s is room
// for a busy machine.
const REPLAY_TIMEOUT_MS = 30_000;
// After the one replay, long enough for several more outbox polls at the backoff cap: a second
// execution would have happened by then.
const OUTBOX_SETTLE_MS = 2_000;

// The revisions rein serves: 2026-07-28 (per-request envelope) and 2025-11-25 (`initialize`).
const SERVED_PROTOCOLS = ["2026-07-28", "2025-11-25"];

// As in tests/python/test_mcp.py. `PORT_ORDERS` / `PORT_BILLING` are the upstreams' ports,
// `@SQLITE@` the store in the test's temp dir.
const CONFIG = `
[server]
listen = "127.0.0.1:0"
client_keys_env = ["${CLIENT_KEY_ENV}"]
admin_key_env = "${ADMIN_KEY_ENV}"

[store]
sqlite_path = "@SQLITE@"

[mcp]
list_ttl_ms = 60000

[mcp.servers.orders]
url = "http://127.0.0.1:PORT_ORDERS/mcp"
timeout_ms = 5000

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
breaker = { failures = 5, cooldown_ms = 1000 }
[[tools.refund.rungs]]
kind = "queue"
source = "outbox"
`;

// rein's tools/list with CONFIG: name -> [upstream server, upstream tool] it stands for.
const EXPECTED_TOOLS = {
  lookup_order: ["orders", "lookup_order"],
  lookup_order_bare: ["orders", "lookup_order"],
  refund: ["orders", "refund"],
  orders__slow_lookup: ["orders", "slow_lookup"],
  billing__get_invoice: ["billing", "get_invoice"],
  billing__send_reminder: ["billing", "send_reminder"],
};

const STATUSES = new Set(["ok", "refused", "busy", "queued", "pending_approval"]);

// ---------------------------------------------------------------------------------------------
// Processes

// Every child this file started, SIGKILLed if the runner exits with them still alive.
const children = new Set();
process.on("exit", () => {
  for (const child of children) child.kill("SIGKILL");
});

function reinBin() {
  if (process.env.REIN_BIN) return path.resolve(process.env.REIN_BIN);
  const target = process.env.CARGO_TARGET_DIR || path.join(ROOT, "target");
  return path.resolve(ROOT, target, "debug", "rein");
}

function python() {
  const interpreter = process.env.REIN_PYTHON || path.join(ROOT, ".venv", "bin", "python");
  if (!existsSync(interpreter)) {
    throw new Error(
      `no Python for the upstream MCP servers at ${interpreter}: run scripts/test-python.sh ` +
        "(it makes .venv with the `mcp` package) or set REIN_PYTHON",
    );
  }
  return interpreter;
}

// A TCP port on 127.0.0.1 that nothing listens on right now.
function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

// Whether a TCP connection to 127.0.0.1:port is accepted now.
function portAccepts(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: "127.0.0.1", port });
    socket.setTimeout(1_000);
    socket.once("connect", () => {
      socket.destroy();
      resolve(true);
    });
    socket.once("error", () => resolve(false));
    socket.once("timeout", () => {
      socket.destroy();
      resolve(false);
    });
  });
}

// Poll `check` (sync or async) until it returns something truthy, and return that; fail naming
// `what` after `timeoutMs`.
async function waitUntil(check, what, timeoutMs = STARTUP_TIMEOUT_MS, intervalMs = 50) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const value = await check();
    if (value) return value;
    if (Date.now() >= deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(intervalMs);
  }
}

// Starts `command args`, stderr to `stderrPath` (appended), and resolves with the child and the
// value of the first stdout line `match` accepts; rejects (the child killed) on a timeout or an
// early exit, with the stderr so far.
function startProcess(what, command, args, { cwd, env, stderrPath, match }) {
  const child = spawn(command, args, {
    cwd,
    env: { ...process.env, ...env },
    stdio: ["ignore", "pipe", openSync(stderrPath, "a")],
  });
  children.add(child);
  const exited = new Promise((resolve) =>
    child.on("exit", (code, signal) => {
      children.delete(child);
      resolve({ code, signal });
    }),
  );
  const stderr = () => readFileSync(stderrPath, "utf8");
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`${what} did not start within ${STARTUP_TIMEOUT_MS} ms; stderr:\n${stderr()}`));
    }, STARTUP_TIMEOUT_MS);
    child.on("error", (error) => {
      clearTimeout(timer);
      reject(new Error(`${what} could not be started: ${error.message}`));
    });
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      const value = match(line);
      if (value !== undefined) {
        clearTimeout(timer);
        resolve(value);
      }
    });
    exited.then(({ code, signal }) => {
      clearTimeout(timer);
      reject(new Error(`${what} exited (${code ?? signal}) before it was ready; stderr:\n${stderr()}`));
    });
  });
  return { child, exited, stderr, ready };
}

// SIGTERM (SIGKILL after STOP_TIMEOUT_MS); the exit status.
async function terminate(proc) {
  proc.child.kill("SIGTERM");
  const timer = setTimeout(() => proc.child.kill("SIGKILL"), STOP_TIMEOUT_MS);
  const status = await proc.exited;
  clearTimeout(timer);
  return status;
}

// One `mcp_upstream.py --name NAME` on a port chosen once and kept across restarts, its state
// (`calls.jsonl`, `ledger.jsonl`) and stderr in `stateDir`.
class Upstream {
  constructor(name, stateDir, port, args = []) {
    Object.assign(this, { name, stateDir, port, args, proc: null });
    mkdirSync(stateDir, { recursive: true });
  }

  static async create(name, stateDir, args = []) {
    return new Upstream(name, stateDir, await freePort(), args);
  }

  get running() {
    return this.proc !== null && this.proc.child.exitCode === null && this.proc.child.signalCode === null;
  }

  async start() {
    assert.ok(!this.running, `upstream ${this.name} is already running`);
    const args = [UPSTREAM_SCRIPT, "--name", this.name, "--port", String(this.port), "--state", this.stateDir];
    this.proc = startProcess(`upstream ${this.name}`, python(), [...args, ...this.args], {
      cwd: this.stateDir,
      env: { PYTHONUNBUFFERED: "1" },
      stderrPath: path.join(this.stateDir, "upstream.stderr"),
      match: (line) => (line.trim() === "ready" ? true : undefined),
    });
    await this.proc.ready;
    await waitUntil(() => portAccepts(this.port), `upstream ${this.name} to accept on ${this.port}`);
    return this;
  }

  // SIGTERM (uvicorn drains for at most a second).
  async stop() {
    if (!this.running) return;
    await terminate(this.proc);
    await waitUntil(async () => !(await portAccepts(this.port)), `upstream ${this.name} to stop accepting`);
  }

  // SIGKILL: connections are reset, the port refuses at once.
  async kill() {
    if (!this.running) return;
    this.proc.child.kill("SIGKILL");
    await this.proc.exited;
    await waitUntil(async () => !(await portAccepts(this.port)), `upstream ${this.name} to stop accepting`);
  }

  // The complete JSON lines of a state file (a line being written may be incomplete).
  lines(file) {
    let text;
    try {
      text = readFileSync(path.join(this.stateDir, file), "utf8");
    } catch (error) {
      if (error.code === "ENOENT") return [];
      throw error;
    }
    return text
      .split("\n")
      .slice(0, -1)
      .filter((line) => line.trim())
      .map((line) => JSON.parse(line));
  }

  // `ledger.jsonl`: one line per refund EXECUTION, `orderId`'s only.
  ledger(orderId) {
    return this.lines("ledger.jsonl").filter((line) => line.order_id === orderId);
  }

  // `calls.jsonl`: one line per invocation as it started (tool, arguments, meta).
  calls(tool) {
    return this.lines("calls.jsonl").filter((line) => line.tool === tool);
  }
}

// One `rein serve` on CONFIG in `workdir`: resolves once it says "rein listening on http://ADDR".
async function startRein(workdir, ordersPort, billingPort) {
  const bin = reinBin();
  if (!existsSync(bin)) throw new Error(`no rein binary at ${bin}: run \`cargo build -p rein\` or set REIN_BIN`);
  const config = path.join(workdir, "rein.toml");
  writeFileSync(
    config,
    CONFIG.replace("@SQLITE@", path.join(workdir, "rein.sqlite"))
      .replace("PORT_ORDERS", String(ordersPort))
      .replace("PORT_BILLING", String(billingPort)),
  );
  const prefix = "rein listening on http://";
  const proc = startProcess("rein serve", bin, ["serve", "--config", config], {
    cwd: workdir,
    env: { [CLIENT_KEY_ENV]: CLIENT_KEY, [ADMIN_KEY_ENV]: ADMIN_KEY, RUST_LOG: "info" },
    stderrPath: path.join(workdir, "rein.stderr"),
    match: (line) => (line.startsWith(prefix) ? line.slice(prefix.length).trim() : undefined),
  });
  const addr = await proc.ready;
  return { addr, proc };
}

// ---------------------------------------------------------------------------------------------
// The shared `billing` server and each test's stack

let billing;
let billingDir;
before(async () => {
  billingDir = mkdtempSync(path.join(tmpdir(), "rein-node-mcp-billing-"));
  billing = await (await Upstream.create("billing", billingDir)).start();
});
after(async () => {
  await billing?.stop();
  if (billingDir) rmSync(billingDir, { recursive: true, force: true });
});

// This test's `orders` server (with `ordersArgs`) and a rein in front of it and `billing`. In the
// test's `after`: the clients it opened are closed, rein gets SIGTERM and must exit 0 (its temp dir
// is kept, and its stderr shown, when it does not), `orders` is stopped.
async function makeStack(t, ordersArgs = []) {
  const workdir = mkdtempSync(path.join(tmpdir(), "rein-node-mcp-"));
  const orders = await Upstream.create("orders", path.join(workdir, "orders"), ordersArgs);
  const clients = [];
  let rein = null;
  t.after(async () => {
    await Promise.allSettled(clients.map((client) => client.close()));
    try {
      if (rein) {
        const { code, signal } = await terminate(rein.proc);
        if (code !== 0) {
          throw new Error(
            `rein serve did not exit cleanly after SIGTERM (code ${code}, signal ${signal}); ` +
              `kept ${workdir}; stderr:\n${rein.proc.stderr()}`,
          );
        }
      }
    } finally {
      await orders.stop();
    }
    rmSync(workdir, { recursive: true, force: true });
  });
  await orders.start();
  rein = await startRein(workdir, orders.port, billing.port);
  return {
    rein,
    orders,
    // An SDK client connected to rein's `/mcp`, sending `Authorization: Bearer KEY` (no header
    // when `key` is null); closed in the test's `after`.
    async connect(key = CLIENT_KEY) {
      const { client, transport } = await connectMcp(`http://${rein.addr}/mcp`, key);
      clients.push(client);
      return { client, transport };
    },
  };
}

async function connectMcp(url, key = null) {
  const headers = key === null ? {} : { Authorization: `Bearer ${key}` };
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: "rein-node-mcp-suite", version: "1.0.0" });
  // On a failed handshake the SDK closes the client itself, then throws.
  await client.connect(transport, { timeout: CALL_TIMEOUT_MS });
  return { client, transport };
}

// ---------------------------------------------------------------------------------------------
// Reading rein's answers

// One tools/call: the result, rein's envelope (checked for the fields every answer has), and the
// words in `content[0]`.
async function call(client, tool, args) {
  const result = await client.callTool({ name: tool, arguments: args }, undefined, { timeout: CALL_TIMEOUT_MS });
  const shown = JSON.stringify(result);
  const env = result.structuredContent;
  assert.ok(env && typeof env === "object", `no envelope in structuredContent: ${shown}`);
  assert.ok(STATUSES.has(env.status), shown);
  assert.equal(env.tool, tool, shown);
  assert.equal(typeof env.degraded, "boolean", shown);
  assert.equal(result.isError ?? false, env.status === "refused" || env.status === "busy", `isError: ${shown}`);
  const [block] = result.content ?? [];
  assert.equal(block?.type, "text", shown);
  return { result, env, text: block.text, shown };
}

async function listTools(client) {
  const tools = [];
  let cursor;
  do {
    const page = await client.listTools(cursor === undefined ? undefined : { cursor }, { timeout: CALL_TIMEOUT_MS });
    tools.push(...page.tools);
    cursor = page.nextCursor;
  } while (cursor);
  return tools;
}

const saysNotToRetry = (text) => /\b(not|never|don't)\b[^.]*\bretry/i.test(text);
const saysNotExecuted = (text) => /\bnot\b[^.]*\bexecuted\b/i.test(text);

// ---------------------------------------------------------------------------------------------
// 1. tools/list

test("tools/list is the union of both servers", { timeout: TEST_TIMEOUT_MS }, async (t) => {
  const stack = await makeStack(t);
  const upstreamTools = {};
  for (const upstream of [stack.orders, billing]) {
    const { client } = await connectMcp(`http://127.0.0.1:${upstream.port}/mcp`);
    try {
      upstreamTools[upstream.name] = Object.fromEntries((await listTools(client)).map((tool) => [tool.name, tool]));
    } finally {
      await client.close();
    }
  }

  const { client, transport } = await stack.connect();
  // The SDK sends its latest revision in `initialize` and keeps what the server answers; 1.32.2's
  // latest is 2025-11-25, the revision before the one the Python SDK negotiates.
  const negotiated = transport.protocolVersion;
  t.diagnostic(`negotiated MCP protocol version: ${negotiated}`);
  assert.ok(SERVED_PROTOCOLS.includes(negotiated), `negotiated ${negotiated}`);
  const listed = await listTools(client);

  const names = listed.map((tool) => tool.name);
  assert.deepEqual([...names].sort(), Object.keys(EXPECTED_TOOLS).sort());
  for (const tool of listed) {
    const [server, upstreamName] = EXPECTED_TOOLS[tool.name];
    const theirs = upstreamTools[server][upstreamName];
    assert.equal(tool.description, theirs.description, tool.name);
    assert.deepEqual(tool.inputSchema, theirs.inputSchema, tool.name);
    assert.deepEqual(tool.annotations ?? {}, theirs.annotations ?? {}, tool.name);
  }
  const byName = Object.fromEntries(listed.map((tool) => [tool.name, tool]));
  assert.deepEqual(byName.lookup_order.annotations, { readOnlyHint: true });
  assert.deepEqual(byName.refund.annotations, { readOnlyHint: false, destructiveHint: true });
  assert.deepEqual(byName.billing__send_reminder.annotations ?? {}, {});

  // And a call through each server, for the record.
  const invoice = await call(client, "billing__get_invoice", { invoice_id: "I-1" });
  assert.equal(invoice.env.status, "ok", invoice.shown);
  assert.deepEqual(invoice.env.result, { invoice_id: "I-1", total: 42 });
});

// ---------------------------------------------------------------------------------------------
// 2. the cache rung

test("lookup_order answers from cache once the server is killed", { timeout: TEST_TIMEOUT_MS }, async (t) => {
  const stack = await makeStack(t);
  const { client } = await stack.connect();
  const args = { order_id: "A-cache-1" };
  const live = { order_id: "A-cache-1", status: "shipped", served_by: "orders" };

  const first = await call(client, "lookup_order", args);
  assert.equal(first.env.status, "ok", first.shown);
  assert.equal(first.env.degraded, false, first.shown);
  assert.deepEqual(first.env.result, live);

  await stack.orders.kill();
  const started = performance.now();
  const cached = await call(client, "lookup_order", args);
  const elapsedMs = performance.now() - started;
  t.diagnostic(`the cached answer took ${elapsedMs.toFixed(0)} ms`);

  assert.equal(cached.env.status, "ok", cached.shown);
  assert.equal(cached.env.degraded, true, cached.shown);
  assert.equal(cached.env.fidelity, "stale", cached.shown);
  assert.equal(cached.env.source, "cache", cached.shown);
  assert.equal(typeof cached.env.age_ms, "number", cached.shown);
  assert.ok(cached.env.age_ms >= 0, cached.shown);
  assert.deepEqual(cached.env.result, live);
  assert.match(cached.text, /cache/i);
  assert.match(cached.text, /current/i, "the text should say not to claim this is current");
  // The connection is refused at once: no waiting out the 3 s rung timeout.
  assert.ok(elapsedMs < 2_000, `the cached answer took ${elapsedMs.toFixed(0)} ms`);
});

// ---------------------------------------------------------------------------------------------
// 3. every rung dead

for (const [tool, why] of [
  ["lookup_order", "nothing cached"],
  ["lookup_order_bare", "no fallback"],
]) {
  test(`every rung dead is a refusal not to retry (${tool}: ${why})`, { timeout: TEST_TIMEOUT_MS }, async (t) => {
    const stack = await makeStack(t);
    const { client } = await stack.connect();
    // Live once, for other arguments: the cache holds an answer, just not for these.
    const warm = await call(client, tool, { order_id: "A-other" });
    assert.equal(warm.env.status, "ok", warm.shown);

    await stack.orders.kill();
    const { result, env, text, shown } = await call(client, tool, { order_id: "A-never-seen" });
    assert.equal(env.status, "refused", shown);
    assert.equal(result.isError, true, shown);
    assert.equal(env.result ?? null, null, shown);
    assert.ok(saysNotToRetry(text), `the text should tell the model not to retry: ${text}`);
  });
}

// ---------------------------------------------------------------------------------------------
// 4. the bulkhead

test("a full bulkhead answers busy and runs nothing", { timeout: TEST_TIMEOUT_MS }, async (t) => {
  const stack = await makeStack(t, ["--slow-seconds", String(SLOW_SECONDS)]);
  const { client: holder } = await stack.connect();
  const { client } = await stack.connect();

  let firstDone = false;
  const first = call(holder, "orders__slow_lookup", { order_id: "slow-1" }).finally(() => {
    firstDone = true;
  });
  first.catch(() => {}); // awaited below; a failure before then must not also be an unhandled rejection
  await waitUntil(
    () => stack.orders.calls("slow_lookup").length > 0 || firstDone,
    "the first slow_lookup to reach orders",
  );
  if (firstDone) assert.fail(`the first call never reached orders: ${(await first).shown}`);

  const started = performance.now();
  const busy = await call(client, "orders__slow_lookup", { order_id: "slow-2" });
  const elapsedMs = performance.now() - started;
  assert.ok(!firstDone, "the bulkhead was full for the whole second call");
  t.diagnostic(`busy took ${elapsedMs.toFixed(0)} ms`);

  assert.equal(busy.env.status, "busy", busy.shown);
  assert.equal(busy.env.retry_after_ms, 500, busy.shown);
  assert.equal(busy.result.isError, true, busy.shown);
  assert.ok(elapsedMs < SLOW_SECONDS * 1_000, `busy took ${elapsedMs.toFixed(0)} ms: it waited for the slot`);

  const held = await first;
  assert.equal(held.env.status, "ok", held.shown);
  assert.equal(held.env.result.order_id, "slow-1", held.shown);
  // Nothing ran for the refused call.
  assert.deepEqual(
    stack.orders.calls("slow_lookup").map((line) => line.arguments.order_id),
    ["slow-1"],
  );
});

// ---------------------------------------------------------------------------------------------
// 5. a write while the server is down

test("a refund while the server is down is queued, then replayed once", { timeout: TEST_TIMEOUT_MS }, async (t) => {
  const stack = await makeStack(t);
  const orderId = "R-queued-1";
  await stack.orders.stop();
  const { client } = await stack.connect();
  const { env, text, shown } = await call(client, "refund", { order_id: orderId, amount: 7.5 });

  assert.equal(env.status, "queued", shown);
  assert.equal(env.degraded, true, shown);
  assert.ok(env.idempotency_key, shown);
  assert.ok(saysNotExecuted(text), `the text should say the refund has not executed yet: ${text}`);
  assert.deepEqual(stack.orders.ledger(orderId), []);

  await stack.orders.start();
  const restarted = performance.now();
  await waitUntil(() => stack.orders.ledger(orderId).length > 0, "the outbox to replay the refund", REPLAY_TIMEOUT_MS);
  t.diagnostic(`replayed ${((performance.now() - restarted) / 1_000).toFixed(1)} s after orders was back`);
  // Absence can only be waited out: several more outbox polls at the backoff cap.
  await sleep(OUTBOX_SETTLE_MS);
  const ledger = stack.orders.ledger(orderId);
  assert.equal(ledger.length, 1, `the refund executed ${ledger.length} times: ${JSON.stringify(ledger)}`);
  assert.equal(ledger[0].amount, 7.5);
  // Every refund request for the order reached the server with the one key rein answered.
  const keys = new Set(stack.orders.calls("refund").map((line) => line.meta[IDEMPOTENCY_META_KEY]));
  assert.deepEqual([...keys], [env.idempotency_key]);
  assert.equal(ledger[0].key, env.idempotency_key);
});

// ---------------------------------------------------------------------------------------------
// 6. no client key

test("no client key is a 401", { timeout: TEST_TIMEOUT_MS }, async (t) => {
  const stack = await makeStack(t);
  for (const key of [null, "not-the-client-key"]) {
    await assert.rejects(stack.connect(key), (error) => {
      assert.ok(error instanceof StreamableHTTPError, `${key}: ${error?.stack ?? error}`);
      assert.equal(error.code, 401, `${key}: ${error.message}`);
      return true;
    });
  }
  // The key is all it took.
  const { client } = await stack.connect();
  assert.ok((await listTools(client)).length > 0);
});
