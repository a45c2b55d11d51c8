// Starts one `rein serve` for a test file: the binary named by REIN_BIN (default
// ${CARGO_TARGET_DIR:-target}/debug/rein), a config written to a temp dir (simulated providers
// in-process, no network; client key from an env var), and an `openai` client pointed at it with
// retries off. `stop()` sends SIGTERM, fails unless the gateway exits 0, and removes the temp dir
// (kept, with the gateway's stderr, when it fails).

import { spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync, existsSync, openSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { createInterface } from "node:readline";

import OpenAI from "openai";

export const CLIENT_KEY = "node-suite-client-key";
const CLIENT_KEY_ENV = "REIN_NODE_SUITE_CLIENT_KEY";
const STARTUP_TIMEOUT_MS = 60_000;
const STOP_TIMEOUT_MS = 30_000;

// The routes: an OpenAI-format, an Anthropic-format and a Bedrock-format (Converse) tier, each
// alone; `fb-bedrock` answers 529 from Anthropic's API and falls back to the same model on
// Bedrock; `interrupted` breaks its stream after 3 tokens.
const CONFIG = `
[server]
listen = "127.0.0.1:0"
client_keys_env = ["${CLIENT_KEY_ENV}"]
drain_timeout_ms = 5000

[store]
sqlite_path = "@SQLITE@"

[providers.sim-openai]
kind = "sim"
format = "openai"

[providers.sim-anthropic]
kind = "sim"
format = "anthropic"

[providers.sim-bedrock]
kind = "sim"
format = "bedrock"

[routes.openai]
[[routes.openai.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-gpt"

[routes.anthropic]
[[routes.anthropic.tiers]]
name = "primary"
provider = "sim-anthropic"
model = "sim-claude"

[routes.bedrock]
[[routes.bedrock.tiers]]
name = "primary"
provider = "sim-bedrock"
model = "anthropic.claude-sonnet-4-5-sim"

[routes.fb-bedrock]
attempts = 1
[[routes.fb-bedrock.tiers]]
name = "anthropic"
provider = "sim-anthropic"
model = "sim:529"
[[routes.fb-bedrock.tiers]]
name = "bedrock"
provider = "sim-bedrock"
model = "anthropic.claude-sonnet-4-5-sim"

[routes.interrupted]
release = "passthrough"
attempts = 1
[[routes.interrupted.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:stream_error:after=3"
`;

function reinBin() {
  if (process.env.REIN_BIN) return path.resolve(process.env.REIN_BIN);
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
  const target = process.env.CARGO_TARGET_DIR || path.join(root, "target");
  return path.resolve(root, target, "debug", "rein");
}

export async function startRein() {
  const bin = reinBin();
  if (!existsSync(bin)) {
    throw new Error(`no rein binary at ${bin}: run \`cargo build -p rein\` or set REIN_BIN`);
  }
  const workdir = mkdtempSync(path.join(tmpdir(), "rein-node-"));
  const config = path.join(workdir, "rein.toml");
  writeFileSync(config, CONFIG.replace("@SQLITE@", path.join(workdir, "rein.sqlite")));
  const stderrPath = path.join(workdir, "rein.stderr");
  const child = spawn(bin, ["serve", "--config", config], {
    cwd: workdir,
    env: { ...process.env, [CLIENT_KEY_ENV]: CLIENT_KEY, RUST_LOG: "info" },
    stdio: ["ignore", "pipe", openSync(stderrPath, "w")],
  });
  const stderr = () => readFileSync(stderrPath, "utf8");
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));

  const prefix = "rein listening on http://";
  const addr = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`rein serve did not say it was listening within ${STARTUP_TIMEOUT_MS} ms; stderr:\n${stderr()}`));
    }, STARTUP_TIMEOUT_MS);
    const lines = createInterface({ input: child.stdout });
    lines.on("line", (line) => {
      if (line.startsWith(prefix)) {
        clearTimeout(timer);
        resolve(line.slice(prefix.length).trim());
      }
    });
    exited.then(({ code }) => {
      clearTimeout(timer);
      reject(new Error(`rein serve exited (${code}) before it was listening; stderr:\n${stderr()}`));
    });
  });

  const client = new OpenAI({ apiKey: CLIENT_KEY, baseURL: `http://${addr}/v1`, maxRetries: 0, timeout: 30_000 });

  async function stop() {
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_TIMEOUT_MS);
    const { code, signal } = await exited;
    clearTimeout(timer);
    if (code !== 0) {
      throw new Error(`rein serve did not exit cleanly after SIGTERM (code ${code}, signal ${signal}); stderr:\n${stderr()}`);
    }
    rmSync(workdir, { recursive: true, force: true });
  }

  return { addr, client, stop };
}

// Every healthy simulator answer ends with this token.
export const SENTINEL = "[end]";

export function assertSimAnswer(assert, text) {
  assert.equal(typeof text, "string");
  assert.ok(text.startsWith("sim answer "), text);
  assert.ok(text.endsWith(SENTINEL), `answer is not complete: ${JSON.stringify(text)}`);
}
