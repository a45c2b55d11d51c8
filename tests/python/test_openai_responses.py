"""The official `openai` SDK's Responses API against `rein serve`: `responses.create` whole and
streamed, `responses.stream` (the SDK's accumulating helper), function tools and the tool-output
turn sent back statelessly, structured output with `responses.parse` and a pydantic model, from an
OpenAI-format, an Anthropic-format and a Bedrock-format tier (and a fallback from Anthropic's API
to the same model on Bedrock); `previous_response_id` refused as a 400 naming the
field; a stream that breaks mid-answer ending in `response.failed`."""

from __future__ import annotations

import json

import openai
import pytest
from pydantic import BaseModel

from support import ORDER_PARAMETERS, assert_sim_answer

TOOLS = [
    {
        "type": "function",
        "name": "lookup_order",
        "description": "Look an order up by its id.",
        "parameters": ORDER_PARAMETERS,
        "strict": False,
    }
]

ROUTES = pytest.mark.parametrize(
    "route", ["chat", "claude", "bedrock"], ids=["openai-tier", "anthropic-tier", "bedrock-tier"]
)


@ROUTES
def test_create(oai: openai.OpenAI, route: str):
    response = oai.responses.create(
        model=route, instructions="Be brief.", input="where is my order?", store=False
    )
    assert response.object == "response"
    assert response.id.startswith("resp_")
    assert response.status == "completed"
    assert response.instructions == "Be brief."
    assert_sim_answer(response.output_text)
    assert response.usage is not None
    assert response.usage.total_tokens == (
        response.usage.input_tokens + response.usage.output_tokens
    )


@pytest.mark.parametrize("route", ["fb-anthropic", "fb-bedrock"])
def test_a_fallback_says_so_in_the_headers(oai: openai.OpenAI, route: str):
    raw = oai.responses.with_raw_response.create(model=route, input="where is my order?")
    assert raw.headers["x-rein-outcome"] == "fallback"
    assert_sim_answer(raw.parse().output_text)


def test_a_fallback_from_anthropic_to_bedrock_streams(oai: openai.OpenAI):
    with oai.responses.stream(model="fb-bedrock", input="where is my order?") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.status == "completed"
    assert_sim_answer(final.output_text)


@ROUTES
def test_create_streamed(oai: openai.OpenAI, route: str):
    events = list(oai.responses.create(model=route, input="where is my order?", stream=True))
    types = [event.type for event in events]
    assert types[:2] == ["response.created", "response.in_progress"]
    assert types[-1] == "response.completed"
    assert [event.sequence_number for event in events] == list(range(len(events)))
    text = "".join(event.delta for event in events if event.type == "response.output_text.delta")
    assert_sim_answer(text)
    assert events[-1].response.output_text == text


@ROUTES
def test_stream_helper(oai: openai.OpenAI, route: str):
    with oai.responses.stream(model=route, input="where is my order?") as stream:
        for _ in stream:
            pass
        final = stream.get_final_response()
    assert final.status == "completed"
    assert_sim_answer(final.output_text)


@ROUTES
def test_function_call_and_its_output_round_trip(oai: openai.OpenAI, route: str):
    first = oai.responses.create(
        model=route, input="where is my order?", tools=TOOLS, tool_choice="required"
    )
    [call] = [item for item in first.output if item.type == "function_call"]
    assert call.name == "lookup_order"
    assert isinstance(json.loads(call.arguments)["order_id"], str)
    second = oai.responses.create(
        model=route,
        tools=TOOLS,
        input=[
            {"role": "user", "content": "where is my order?"},
            call.model_dump(exclude_none=True),
            {"type": "function_call_output", "call_id": call.call_id, "output": '{"status": "shipped"}'},
        ],
    )
    assert_sim_answer(second.output_text)


@ROUTES
def test_streamed_function_call(oai: openai.OpenAI, route: str):
    with oai.responses.stream(
        model=route, input="where is my order?", tools=TOOLS, tool_choice="required"
    ) as stream:
        types = [event.type for event in stream]
        final = stream.get_final_response()
    assert "response.function_call_arguments.delta" in types
    [call] = [item for item in final.output if item.type == "function_call"]
    assert isinstance(json.loads(call.arguments)["order_id"], str)


class Order(BaseModel):
    order_id: str
    items: int
    shipped: bool


@ROUTES
def test_parse_with_a_pydantic_model(oai: openai.OpenAI, route: str):
    response = oai.responses.parse(model=route, input="where is my order?", text_format=Order)
    assert isinstance(response.output_parsed, Order)
    assert response.output_parsed.order_id


def test_previous_response_id_is_refused_by_name(oai: openai.OpenAI):
    with pytest.raises(openai.BadRequestError) as raised:
        oai.responses.create(model="chat", input="and then?", previous_response_id="resp_123")
    assert raised.value.param == "previous_response_id"
    assert "stateless" in raised.value.message


def test_a_broken_stream_ends_in_response_failed(oai: openai.OpenAI):
    events = list(oai.responses.create(model="interrupted", input="where is my order?", stream=True))
    types = [event.type for event in events]
    assert "response.output_text.delta" in types
    assert types[-1] == "response.failed"
    assert "response.completed" not in types
    assert events[-1].response.status == "failed"
