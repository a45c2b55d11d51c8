"""The official `openai` SDK against `rein serve`, healthy routes: a plain chat completion, a
system message reaching the provider, streaming (with and without the final usage chunk), tool
calls (whole, streamed, and the tool-result turn back), structured output (`json_schema`, the SDK's
`parse` with a pydantic model, streamed `parse`) from both an OpenAI-format and an Anthropic-format
tier, `models.list()` listing the routes, and `with_raw_response` exposing rein's headers."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from conftest import ROUTES
from support import (
    OPENAI_TOOLS,
    QUESTION,
    assert_sim_answer,
    openai_finish_reasons,
    openai_stream_text,
)


def test_chat_completion(oai: openai.OpenAI):
    completion = oai.chat.completions.create(model="chat", messages=QUESTION)
    assert completion.object == "chat.completion"
    assert completion.id.startswith("chatcmpl-")
    assert completion.model == "sim-primary", "the body names the model that answered"
    [choice] = completion.choices
    assert choice.finish_reason == "stop"
    assert choice.message.role == "assistant"
    assert choice.message.tool_calls is None
    assert_sim_answer(choice.message.content)
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens > 0
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    # The SDK keeps unknown top-level fields: rein's summary of the call.
    rein = completion.model_extra["rein"]
    assert {key: rein.get(key) for key in ("outcome", "route", "tier", "attempts")} == {
        "outcome": "answered",
        "route": "chat",
        "tier": "primary",
        "attempts": 1,
    }


def test_system_message_reaches_the_provider(oai: openai.OpenAI):
    plain = oai.chat.completions.create(model="chat", messages=QUESTION)
    with_system = oai.chat.completions.create(
        model="chat", messages=[{"role": "system", "content": "Be brief."}, *QUESTION]
    )
    # The simulator's answer hashes the whole conversation, system prompt included.
    assert_sim_answer(with_system.choices[0].message.content)
    assert with_system.choices[0].message.content != plain.choices[0].message.content


def test_max_completion_tokens_truncates_with_finish_reason_length(oai: openai.OpenAI):
    completion = oai.chat.completions.create(
        model="chat", messages=QUESTION, max_completion_tokens=5
    )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage.completion_tokens == 5


def test_streaming(oai: openai.OpenAI):
    chunks = list(oai.chat.completions.create(model="chat", messages=QUESTION, stream=True))
    assert chunks, "no chunks"
    assert all(chunk.object == "chat.completion.chunk" for chunk in chunks)
    assert len({chunk.id for chunk in chunks}) == 1, "every chunk carries the same id"
    assert chunks[0].choices[0].delta.role == "assistant"
    text = openai_stream_text(chunks)
    assert_sim_answer(text)
    finish = openai_finish_reasons(chunks)
    assert finish == ["stop"]
    assert all(chunk.usage is None for chunk in chunks), "no usage chunk unless asked"
    assert chunks[-1].model == "sim-primary"


def test_streaming_with_include_usage_ends_with_a_usage_chunk(oai: openai.OpenAI):
    chunks = list(
        oai.chat.completions.create(
            model="chat",
            messages=QUESTION,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    *content, last = chunks
    assert last.choices == [], "the usage chunk has no choices"
    assert last.usage is not None
    assert last.usage.prompt_tokens > 0
    assert last.usage.completion_tokens > 0
    assert last.usage.total_tokens == last.usage.prompt_tokens + last.usage.completion_tokens
    assert all(chunk.usage is None for chunk in content)
    assert_sim_answer(openai_stream_text(content))


@pytest.mark.parametrize("route", ["chat", "claude"], ids=["openai-tier", "anthropic-tier"])
def test_tool_call_required(oai: openai.OpenAI, route: str):
    completion = oai.chat.completions.create(
        model=route, messages=QUESTION, tools=OPENAI_TOOLS, tool_choice="required"
    )
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function"
    assert call.id
    assert call.function.name == "lookup_order"
    arguments = json.loads(call.function.arguments)
    assert isinstance(arguments, dict)
    assert isinstance(arguments["order_id"], str)


def test_tool_result_turn_gets_an_answer(oai: openai.OpenAI):
    first = oai.chat.completions.create(
        model="chat", messages=QUESTION, tools=OPENAI_TOOLS, tool_choice="required"
    )
    message = first.choices[0].message
    [call] = message.tool_calls
    second = oai.chat.completions.create(
        model="chat",
        tools=OPENAI_TOOLS,
        messages=[
            *QUESTION,
            message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": '{"status": "shipped"}'},
        ],
    )
    assert second.choices[0].finish_reason == "stop"
    assert_sim_answer(second.choices[0].message.content)


@pytest.mark.parametrize("route", ["chat", "claude"], ids=["openai-tier", "anthropic-tier"])
def test_streamed_tool_call_accumulates_in_the_sdk(oai: openai.OpenAI, route: str):
    with oai.chat.completions.stream(
        model=route, messages=QUESTION, tools=OPENAI_TOOLS, tool_choice="required"
    ) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    [choice] = completion.choices
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "lookup_order"
    assert isinstance(json.loads(call.function.arguments)["order_id"], str)


ORDER_SCHEMA = {
    "type": "object",
    "properties": {
        "order_id": {"type": "string"},
        "items": {"type": "integer"},
        "shipped": {"type": "boolean"},
    },
    "required": ["order_id", "items", "shipped"],
    "additionalProperties": False,
}


@pytest.mark.parametrize("route", ["chat", "claude"], ids=["openai-tier", "anthropic-tier"])
def test_response_format_json_schema(oai: openai.OpenAI, route: str):
    completion = oai.chat.completions.create(
        model=route,
        messages=QUESTION,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "order", "schema": ORDER_SCHEMA, "strict": True},
        },
    )
    document = json.loads(completion.choices[0].message.content)
    assert set(document) == {"order_id", "items", "shipped"}
    assert isinstance(document["order_id"], str)
    assert isinstance(document["items"], int)
    assert isinstance(document["shipped"], bool)


class Order(BaseModel):
    order_id: str
    items: int
    shipped: bool


def _parse(oai: openai.OpenAI):
    """`client.chat.completions.parse` where the SDK has it, else the older `beta` spelling."""
    if hasattr(oai.chat.completions, "parse"):
        return oai.chat.completions.parse
    return oai.beta.chat.completions.parse


@pytest.mark.parametrize("route", ["chat", "claude"], ids=["openai-tier", "anthropic-tier"])
def test_parse_with_a_pydantic_model(oai: openai.OpenAI, route: str):
    completion = _parse(oai)(model=route, messages=QUESTION, response_format=Order)
    message = completion.choices[0].message
    assert message.refusal is None
    assert isinstance(message.parsed, Order)
    assert message.parsed.order_id


def test_streamed_parse_with_a_pydantic_model(oai: openai.OpenAI):
    with oai.chat.completions.stream(
        model="chat", messages=QUESTION, response_format=Order
    ) as stream:
        for _ in stream:
            pass
        completion = stream.get_final_completion()
    assert isinstance(completion.choices[0].message.parsed, Order)


def test_models_list_names_the_routes(oai: openai.OpenAI):
    models = list(oai.models.list())
    assert sorted(model.id for model in models) == sorted(ROUTES)
    assert all(model.object == "model" for model in models)


def test_raw_response_carries_reins_headers(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(model="chat", messages=QUESTION)
    assert raw.status_code == 200
    assert raw.headers["x-rein-outcome"] == "answered"
    assert raw.headers["x-rein-route"] == "chat"
    assert raw.headers["x-rein-tier"] == "primary"
    assert raw.headers["x-rein-model"] == "sim-primary"
    assert raw.headers["x-rein-attempts"] == "1"
    request_id = raw.headers["x-rein-request-id"]
    assert request_id.startswith("req_")
    completion = raw.parse()
    assert completion._request_id == request_id, "the SDK reads rein's id from x-request-id"
    assert_sim_answer(completion.choices[0].message.content)


def test_raw_streaming_response_carries_reins_headers(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(
        model="chat", messages=QUESTION, stream=True
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    # The default release mode is checked: the outcome is known before the first byte.
    assert raw.headers["x-rein-outcome"] == "answered"
    assert raw.headers["x-rein-model"] == "sim-primary"
    text = openai_stream_text(raw.parse())
    assert_sim_answer(text)
