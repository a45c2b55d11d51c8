"""Fixtures for the official-SDK suite: one `rein serve` for the whole session, started from the
binary named by `REIN_BIN` (default `${CARGO_TARGET_DIR:-target}/debug/rein`) with a test config
written to a temp dir (simulated providers in-process, no network; client key from an env var),
and `openai` / `anthropic` clients pointed at it with `max_retries=0`. At the end the gateway gets
SIGTERM and must exit 0 (`mcp_harness.start_rein` / `stop_rein`, shared with the MCP tests).

The routes (see CONFIG):
- `chat`: an OpenAI-format sim tier, then an Anthropic-format one; healthy.
- `claude`: one Anthropic-format sim tier; healthy.
- `bedrock`: one Bedrock-format (Converse) sim tier; healthy.
- `fb-bedrock`: primary an Anthropic-format `sim:529`, backup the same model on Bedrock.
- `fb-openai`: primary `sim:529` (always overloaded), backup an OpenAI-format sim tier.
- `fb-anthropic`: primary `sim:500`, backup an Anthropic-format sim tier.
- `policy`: primary `sim:content_policy` with a healthy fallback that must not be used.
- `down`: every tier overloaded; the degraded reply is the answer.
- `down-error`: the same, with the degraded reply delivered as an error (`deliver = "error"`).
- `down-json`: the same, with a schema-shaped degraded object for callers that ask for JSON.
- `unconfigured`: every tier rejects rein's key (401) and no degraded reply is configured.
- `passthrough`: `release = "passthrough"`, tokens trickle in (OpenAI-format tier).
- `checked`: `release = "checked"`, tokens trickle in (Anthropic-format tier).
- `held`: checked, a silent primary (1 s first-token clock, two attempts) and a healthy
  fallback, with a 200 ms `stream_keepalive_ms`: the answer is held about 2 s.
- `held-quiet`: the same with the keep-alive off.
- `interrupted`: passthrough, the stream breaks after 3 tokens.
- `agent`: one OpenAI-format sim tier with its own output schema (a reply and a reason), for
  agents that use tools and a structured final answer on one route.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest

from mcp_harness import rein_stderr_path, start_rein, stop_rein
from support import ADMIN_KEY, CLIENT_KEY, DEGRADED_TEXT, POLICY_REASON

CLIENT_KEY_ENV = "REIN_SDK_SUITE_CLIENT_KEY"
ADMIN_KEY_ENV = "REIN_SDK_SUITE_ADMIN_KEY"

def _say(text: str) -> str:
    """A simulator step that answers exactly `text` (`say:b64=...`)."""
    import base64

    return "say:b64=" + base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# Scripted answers for the validation-ladder tests: an enum in the wrong letter case (repaired in
# code), and an answer missing a required field followed by a good one (one re-ask).
WRONG_CASE = '{"order_id": "A10234", "reason": "Refund"}'
MISSING_FIELD = '{"order_id": "A10234"}'
GOOD_REFUND = '{"order_id": "A10234", "reason": "refund"}'

# `@SQLITE@` is replaced with a path in the session's temp dir.
CONFIG = f"""
[server]
listen = "127.0.0.1:0"
client_keys_env = ["{CLIENT_KEY_ENV}"]
admin_key_env = "{ADMIN_KEY_ENV}"
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

[routes.chat]
[[routes.chat.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-primary"
[[routes.chat.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.claude]
[[routes.claude.tiers]]
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
name = "primary"
provider = "sim-anthropic"
model = "sim:529"
[[routes.fb-bedrock.tiers]]
name = "bedrock"
provider = "sim-bedrock"
model = "anthropic.claude-sonnet-4-5-sim"

[routes.fb-openai]
attempts = 1
[[routes.fb-openai.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"
[[routes.fb-openai.tiers]]
name = "backup"
provider = "sim-openai"
model = "sim-backup-openai"

[routes.fb-anthropic]
attempts = 1
[[routes.fb-anthropic.tiers]]
name = "primary"
provider = "sim-anthropic"
model = "sim:500"
[[routes.fb-anthropic.tiers]]
name = "backup"
provider = "sim-anthropic"
model = "sim-backup-anthropic"

[routes.policy]
[[routes.policy.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:content_policy:reason={POLICY_REASON}"
[[routes.policy.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-never-used"

[routes.down]
attempts = 1
degraded = {{ template = "{DEGRADED_TEXT}" }}
[[routes.down.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"
[[routes.down.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim:529"

[routes.down-error]
attempts = 1
degraded = {{ template = "{DEGRADED_TEXT}", deliver = "error" }}
[[routes.down-error.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"

[routes.down-json]
attempts = 1
degraded = {{ template = "{DEGRADED_TEXT}", json = {{ reply = "{DEGRADED_TEXT}", reason = "outage" }} }}
[[routes.down-json.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:529"

[routes.unconfigured]
[[routes.unconfigured.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:401"
[[routes.unconfigured.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim:401"

[routes.passthrough]
release = "passthrough"
[[routes.passthrough.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:ok+token_delay:ms=5"

[routes.checked]
release = "checked"
[[routes.checked.tiers]]
name = "primary"
provider = "sim-anthropic"
model = "sim:ok+token_delay:ms=5"

[routes.held]
release = "checked"
first_token_ms = 1000
attempt_ms = 3000
min_attempt_ms = 1000
stream_keepalive_ms = 200
[[routes.held.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:hang"
[[routes.held.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.held-quiet]
release = "checked"
first_token_ms = 1000
attempt_ms = 3000
min_attempt_ms = 1000
stream_keepalive_ms = 0
[[routes.held-quiet.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:hang"
[[routes.held-quiet.tiers]]
name = "fallback"
provider = "sim-anthropic"
model = "sim-fallback"

[routes.ladder-repair]
[[routes.ladder-repair.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:{_say(WRONG_CASE)}"

[routes.ladder-reask]
[[routes.ladder-reask.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:{_say(MISSING_FIELD)},{_say(GOOD_REFUND)}"

[routes.agent]
[[routes.agent.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim-agent"
[routes.agent.output.schema]
type = "object"
required = ["reply", "reason"]
additionalProperties = false
[routes.agent.output.schema.properties]
reply = {{ type = "string" }}
reason = {{ type = "string", enum = ["refund", "delivery", "other"] }}

[routes.interrupted]
release = "passthrough"
attempts = 1
[[routes.interrupted.tiers]]
name = "primary"
provider = "sim-openai"
model = "sim:stream_error:after=3"
"""

ROUTES = [
    "agent",
    "bedrock",
    "chat",
    "checked",
    "claude",
    "down",
    "down-error",
    "down-json",
    "fb-anthropic",
    "fb-bedrock",
    "fb-openai",
    "held",
    "held-quiet",
    "interrupted",
    "ladder-reask",
    "ladder-repair",
    "passthrough",
    "policy",
    "unconfigured",
]

# Generous: the machine may be busy with builds; nothing here should take more than a second.
CLIENT_TIMEOUT_S = 30


@dataclass
class Rein:
    addr: str
    process: subprocess.Popen
    stderr_path: Path

    @property
    def openai_base_url(self) -> str:
        return f"http://{self.addr}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return f"http://{self.addr}"

    def openai_client(self, api_key: str = CLIENT_KEY) -> openai.OpenAI:
        return openai.OpenAI(
            api_key=api_key,
            base_url=self.openai_base_url,
            max_retries=0,
            timeout=CLIENT_TIMEOUT_S,
        )

    def anthropic_client(self, api_key: str | None = CLIENT_KEY, **kwargs) -> anthropic.Anthropic:
        return anthropic.Anthropic(
            api_key=api_key,
            base_url=self.anthropic_base_url,
            max_retries=0,
            timeout=CLIENT_TIMEOUT_S,
            **kwargs,
        )


@pytest.fixture(scope="session")
def rein(tmp_path_factory: pytest.TempPathFactory):
    workdir = tmp_path_factory.mktemp("rein")
    addr, process = start_rein(CONFIG, workdir, {CLIENT_KEY_ENV: CLIENT_KEY, ADMIN_KEY_ENV: ADMIN_KEY})
    yield Rein(addr=addr, process=process, stderr_path=rein_stderr_path(workdir))
    stop_rein(process, workdir)


@pytest.fixture(scope="session")
def oai(rein: Rein):
    client = rein.openai_client()
    yield client
    client.close()


@pytest.fixture(scope="session")
def claude(rein: Rein):
    client = rein.anthropic_client()
    yield client
    client.close()
