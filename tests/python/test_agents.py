"""Agents through rein: tools and a structured final answer in one request, and a short caller
deadline. First with the official `openai` SDK by hand (a tool and `response_format:
json_schema`: the tool call comes back first, then after the tool result the checked final
object), then with Pydantic AI (`NativeOutput`, pinned in requirements.txt) driving the same
loop itself against a route with its own output schema. Regressions: rein used to re-ask the
tool-call turn as "the answer is empty" and return the degraded reply, and any
`x-rein-deadline-ms` of 8000 or less got the degraded reply at once on a healthy route."""

from __future__ import annotations

import json
from typing import Literal

import openai
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, NativeOutput
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from conftest import CLIENT_KEY, CLIENT_TIMEOUT_S, Rein
from support import DEGRADED_TEXT, OPENAI_TOOLS, assert_sim_answer, openai_finish_reasons

# The simulator calls a tool when the user's words say "tool".
ASK_WITH_TOOL = [{"role": "user", "content": "Use the tool to look up order A10234."}]

REASON_SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "reason",
        "strict": True,
        "schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["reply", "reason"],
            "properties": {
                "reply": {"type": "string"},
                "reason": {"type": "string", "enum": ["refund", "delivery", "other"]},
            },
        },
    },
}


def test_tool_call_first_then_the_checked_final_object(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(
        model="chat", messages=ASK_WITH_TOOL, tools=OPENAI_TOOLS, response_format=REASON_SCHEMA
    )
    assert raw.headers["x-rein-outcome"] == "answered"
    assert raw.headers["x-rein-reasks"] == "0", "the tool call is not re-asked as an answer"
    first = raw.parse()
    [choice] = first.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "lookup_order"
    assert json.loads(call.function.arguments) == {"order_id": "sim-order_id"}

    # The agent runs the tool and sends its result: now the answer, held to the schema.
    history = [
        *ASK_WITH_TOOL,
        choice.message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"status": "shipped"}'},
    ]
    raw = oai.chat.completions.with_raw_response.create(
        model="chat", messages=history, tools=OPENAI_TOOLS, response_format=REASON_SCHEMA
    )
    assert raw.headers["x-rein-outcome"] == "answered"
    final = raw.parse().choices[0]
    assert final.finish_reason == "stop"
    assert final.message.tool_calls is None
    assert json.loads(final.message.content) == {"reply": "sim-reply", "reason": "refund"}


def test_tool_call_streamed_under_a_schema(oai: openai.OpenAI):
    stream = oai.chat.completions.create(
        model="chat",
        messages=ASK_WITH_TOOL,
        tools=OPENAI_TOOLS,
        response_format=REASON_SCHEMA,
        stream=True,
    )
    chunks = list(stream)
    deltas = [
        delta
        for chunk in chunks
        if chunk.choices
        for delta in chunk.choices[0].delta.tool_calls or []
        if delta.function
    ]
    names = [delta.function.name for delta in deltas if delta.function.name]
    arguments = "".join(delta.function.arguments or "" for delta in deltas)
    assert names == ["lookup_order"]
    assert json.loads(arguments) == {"order_id": "sim-order_id"}
    assert openai_finish_reasons(chunks) == ["tool_calls"]


@pytest.mark.parametrize("deadline_ms", ["5000", "8000"])
def test_a_short_caller_deadline_gets_its_answer(oai: openai.OpenAI, deadline_ms: str):
    raw = oai.chat.completions.with_raw_response.create(
        model="chat",
        messages=[{"role": "user", "content": "where is my order?"}],
        extra_headers={"x-rein-deadline-ms": deadline_ms},
    )
    assert raw.headers["x-rein-outcome"] == "answered"
    assert raw.headers["x-rein-attempts"] == "1"
    content = raw.parse().choices[0].message.content
    assert content != DEGRADED_TEXT
    assert_sim_answer(content)


class Reason(BaseModel):
    reply: str
    reason: Literal["refund", "delivery", "other"]


def _agent(rein: Rein, route: str, looked_up: list[str]) -> Agent:
    client = openai.AsyncOpenAI(
        api_key=CLIENT_KEY,
        base_url=rein.openai_base_url,
        max_retries=0,
        timeout=CLIENT_TIMEOUT_S,
    )
    model = OpenAIChatModel(route, provider=OpenAIProvider(openai_client=client))
    agent = Agent(model, output_type=NativeOutput(Reason))

    @agent.tool_plain
    def lookup_order(order_id: str) -> str:
        """Look an order up by its id."""
        looked_up.append(order_id)
        return '{"status": "shipped"}'

    return agent


def test_pydantic_ai_runs_the_tool_then_gets_the_checked_object(rein: Rein):
    looked_up: list[str] = []
    agent = _agent(rein, "agent", looked_up)
    result = agent.run_sync("Use the tool to look up order A10234.")
    assert looked_up == ["sim-order_id"], "the agent ran the tool the model called"
    assert result.output == Reason(reply="sim-reply", reason="refund")
    # The model was asked twice: the tool-call turn, then the answer after the tool result.
    requests = [m for m in result.all_messages() if m.kind == "request"]
    assert len(requests) == 2
    assert any(
        part.part_kind == "tool-return" and part.tool_name == "lookup_order"
        for part in requests[1].parts
    )


def test_pydantic_ai_without_a_tool_call_gets_the_object_at_once(rein: Rein):
    looked_up: list[str] = []
    result = _agent(rein, "agent", looked_up).run_sync("Why did the customer write?")
    assert looked_up == []
    assert result.output == Reason(reply="sim-reply", reason="refund")
