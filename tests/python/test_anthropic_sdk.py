"""The official `anthropic` SDK against `rein serve`, healthy routes: `messages.create`
(plain, with a system prompt as a string and as text blocks, truncated by `max_tokens`),
streaming through the `messages.stream(...)` helper and with `stream=True`, tool use
(`tool_choice={"type": "any"}` whole and streamed, then the `tool_result` turn back) from both an
Anthropic-format and an OpenAI-format tier, the client key sent as `Authorization: Bearer`
(`auth_token=`) as well as `x-api-key`, `models.list()` naming the routes, and structured output
through `messages.parse(output_format=...)` with a pydantic model, answered by an Anthropic-format
tier and by an OpenAI-format tier (the schema travels as the canonical response format)."""

from __future__ import annotations

import anthropic
import pytest
from pydantic import BaseModel

from conftest import ROUTES
from support import ANTHROPIC_TOOLS, CLIENT_KEY, QUESTION, assert_sim_answer


def test_messages_create(claude: anthropic.Anthropic):
    message = claude.messages.create(model="claude", max_tokens=200, messages=QUESTION)
    assert message.type == "message"
    assert message.role == "assistant"
    assert message.id.startswith("msg_")
    assert message.model == "sim-claude", "the body names the model that answered"
    assert message.stop_reason == "end_turn"
    [block] = message.content
    assert block.type == "text"
    assert_sim_answer(block.text)
    assert message.usage.input_tokens > 0
    assert message.usage.output_tokens > 0
    rein = message.model_extra["rein"]
    assert {key: rein.get(key) for key in ("outcome", "route", "tier", "attempts")} == {
        "outcome": "answered",
        "route": "claude",
        "tier": "primary",
        "attempts": 1,
    }
    assert message._request_id.startswith("req_"), "the SDK reads rein's id from request-id"


def test_messages_create_served_by_an_openai_format_tier(claude: anthropic.Anthropic):
    message = claude.messages.create(model="chat", max_tokens=200, messages=QUESTION)
    assert message.model == "sim-primary"
    assert message.stop_reason == "end_turn"
    assert_sim_answer(message.content[0].text)


@pytest.mark.parametrize(
    "system",
    ["Be brief.", [{"type": "text", "text": "Be brief."}]],
    ids=["string", "text-blocks"],
)
def test_system_prompt_reaches_the_provider(claude: anthropic.Anthropic, system):
    plain = claude.messages.create(model="claude", max_tokens=200, messages=QUESTION)
    with_system = claude.messages.create(
        model="claude", max_tokens=200, messages=QUESTION, system=system
    )
    # The simulator's answer hashes the whole conversation, system prompt included; the same
    # prompt as a string or as blocks is the same conversation.
    assert_sim_answer(with_system.content[0].text)
    assert with_system.content[0].text != plain.content[0].text
    same_as_string = claude.messages.create(
        model="claude", max_tokens=200, messages=QUESTION, system="Be brief."
    )
    assert with_system.content[0].text == same_as_string.content[0].text


def test_max_tokens_truncates_with_stop_reason_max_tokens(claude: anthropic.Anthropic):
    message = claude.messages.create(model="claude", max_tokens=5, messages=QUESTION)
    assert message.stop_reason == "max_tokens"
    assert message.usage.output_tokens == 5


def test_stream_helper(claude: anthropic.Anthropic):
    with claude.messages.stream(model="claude", max_tokens=200, messages=QUESTION) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert_sim_answer(text)
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"
    assert final.model == "sim-claude"
    assert final.usage.output_tokens > 0


def test_stream_true_event_sequence(claude: anthropic.Anthropic):
    events = list(
        claude.messages.create(model="claude", max_tokens=200, messages=QUESTION, stream=True)
    )
    types = [event.type for event in events]
    assert types[0] == "message_start"
    assert types[1] == "content_block_start"
    assert types[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert events[0].message.model == "sim-claude"
    deltas = [e.delta for e in events if e.type == "content_block_delta"]
    assert all(delta.type == "text_delta" for delta in deltas)
    assert_sim_answer("".join(delta.text for delta in deltas))
    [message_delta] = [e for e in events if e.type == "message_delta"]
    assert message_delta.delta.stop_reason == "end_turn"
    assert message_delta.usage.output_tokens > 0


@pytest.mark.parametrize("route", ["claude", "chat"], ids=["anthropic-tier", "openai-tier"])
def test_tool_use_any(claude: anthropic.Anthropic, route: str):
    message = claude.messages.create(
        model=route,
        max_tokens=200,
        messages=QUESTION,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
    )
    assert message.stop_reason == "tool_use"
    [block] = [b for b in message.content if b.type == "tool_use"]
    assert block.name == "lookup_order"
    assert block.id
    assert isinstance(block.input, dict)
    assert isinstance(block.input["order_id"], str)


@pytest.mark.parametrize("route", ["claude", "chat"], ids=["anthropic-tier", "openai-tier"])
def test_streamed_tool_use_accumulates_in_the_sdk(claude: anthropic.Anthropic, route: str):
    with claude.messages.stream(
        model=route,
        max_tokens=200,
        messages=QUESTION,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    [block] = [b for b in final.content if b.type == "tool_use"]
    assert block.name == "lookup_order"
    assert isinstance(block.input, dict)
    assert isinstance(block.input["order_id"], str)


def test_tool_result_turn_gets_an_answer(claude: anthropic.Anthropic):
    first = claude.messages.create(
        model="claude",
        max_tokens=200,
        messages=QUESTION,
        tools=ANTHROPIC_TOOLS,
        tool_choice={"type": "any"},
    )
    [tool_use] = [b for b in first.content if b.type == "tool_use"]
    second = claude.messages.create(
        model="claude",
        max_tokens=200,
        tools=ANTHROPIC_TOOLS,
        messages=[
            *QUESTION,
            {"role": "assistant", "content": first.content},
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": tool_use.id, "content": "shipped"}
                ],
            },
        ],
    )
    assert second.stop_reason == "end_turn"
    assert_sim_answer(second.content[0].text)


def test_client_key_as_bearer_token(rein):
    client = rein.anthropic_client(api_key=None, auth_token=CLIENT_KEY)
    try:
        message = client.messages.create(model="claude", max_tokens=50, messages=QUESTION)
    finally:
        client.close()
    assert message.content[0].text.startswith("sim answer ")


def test_models_list_names_the_routes(claude: anthropic.Anthropic):
    assert sorted(model.id for model in claude.models.list()) == sorted(ROUTES)


class Order(BaseModel):
    order_id: str
    items: int
    shipped: bool


def test_parse_with_output_format_on_an_anthropic_format_tier(claude: anthropic.Anthropic):
    message = claude.messages.parse(
        model="claude", max_tokens=200, messages=QUESTION, output_format=Order
    )
    assert isinstance(message.parsed_output, Order)
    assert message.parsed_output.order_id


def test_parse_with_output_format_on_an_openai_format_tier(claude: anthropic.Anthropic):
    message = claude.messages.parse(
        model="chat", max_tokens=200, messages=QUESTION, output_format=Order
    )
    assert isinstance(message.parsed_output, Order)
