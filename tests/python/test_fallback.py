"""Fallback and degradation through both official SDKs. A route whose primary tier always fails
(`sim:529` on `fb-openai`, `sim:500` on `fb-anthropic`) still answers: the SDK gets a normal
response, `x-rein-outcome: fallback`, and a body `model` naming the backup tier's model. Each SDK
calls both routes, so one of each pair is cross-format (the OpenAI SDK served by an
Anthropic-format tier and the reverse), whole and streamed. A route where every tier fails
answers with its degraded reply, which both SDKs parse as an ordinary answer, whole and streamed."""

from __future__ import annotations

import anthropic
import openai
import pytest

from support import DEGRADED_TEXT, QUESTION, assert_sim_answer, openai_stream_text

FALLBACK_ROUTES = {
    # route: the model of its backup tier (same wire format as the primary)
    "fb-openai": "sim-backup-openai",
    "fb-anthropic": "sim-backup-anthropic",
}
IDS = ["openai-format-tiers", "anthropic-format-tiers"]


def assert_fallback_headers(headers, route: str) -> None:
    assert headers["x-rein-outcome"] == "fallback"
    assert headers["x-rein-route"] == route
    assert headers["x-rein-tier"] == "backup"
    assert headers["x-rein-model"] == FALLBACK_ROUTES[route]
    # 2 while the primary's breaker is closed, 1 once it is open and the primary is skipped.
    assert int(headers["x-rein-attempts"]) >= 1


@pytest.mark.parametrize("route", FALLBACK_ROUTES, ids=IDS)
def test_openai_sdk_gets_the_fallback_answer(oai: openai.OpenAI, route: str):
    raw = oai.chat.completions.with_raw_response.create(model=route, messages=QUESTION)
    assert raw.status_code == 200
    assert_fallback_headers(raw.headers, route)
    completion = raw.parse()
    assert completion.model == FALLBACK_ROUTES[route], "the body names the model that answered"
    assert completion.choices[0].finish_reason == "stop"
    assert_sim_answer(completion.choices[0].message.content)
    assert completion.model_extra["rein"]["outcome"] == "fallback"
    assert completion.model_extra["rein"]["tier"] == "backup"


@pytest.mark.parametrize("route", FALLBACK_ROUTES, ids=IDS)
def test_openai_sdk_streams_the_fallback_answer(oai: openai.OpenAI, route: str):
    raw = oai.chat.completions.with_raw_response.create(
        model=route, messages=QUESTION, stream=True, stream_options={"include_usage": True}
    )
    assert_fallback_headers(raw.headers, route)
    chunks = list(raw.parse())
    assert {chunk.model for chunk in chunks} == {FALLBACK_ROUTES[route]}
    assert_sim_answer(openai_stream_text(chunks))
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


@pytest.mark.parametrize("route", FALLBACK_ROUTES, ids=IDS)
def test_anthropic_sdk_gets_the_fallback_answer(claude: anthropic.Anthropic, route: str):
    raw = claude.messages.with_raw_response.create(model=route, max_tokens=200, messages=QUESTION)
    assert raw.status_code == 200
    assert_fallback_headers(raw.headers, route)
    message = raw.parse()
    assert message.model == FALLBACK_ROUTES[route], "the body names the model that answered"
    assert message.stop_reason == "end_turn"
    assert_sim_answer(message.content[0].text)
    assert message.model_extra["rein"]["outcome"] == "fallback"


@pytest.mark.parametrize("route", FALLBACK_ROUTES, ids=IDS)
def test_anthropic_sdk_streams_the_fallback_answer(claude: anthropic.Anthropic, route: str):
    with claude.messages.with_streaming_response.create(
        model=route, max_tokens=200, messages=QUESTION, stream=True
    ) as raw:
        assert_fallback_headers(raw.headers, route)
        events = list(raw.parse())
    assert events[0].type == "message_start"
    assert events[0].message.model == FALLBACK_ROUTES[route]
    assert events[-1].type == "message_stop"
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert_sim_answer(text)


def test_openai_sdk_gets_the_degraded_reply(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(model="down", messages=QUESTION)
    assert raw.status_code == 200
    assert raw.headers["x-rein-outcome"] == "degraded"
    completion = raw.parse()
    assert completion.choices[0].message.content == DEGRADED_TEXT
    assert completion.model_extra["rein"]["outcome"] == "degraded"


def test_anthropic_sdk_gets_the_degraded_reply(claude: anthropic.Anthropic):
    raw = claude.messages.with_raw_response.create(model="down", max_tokens=200, messages=QUESTION)
    assert raw.status_code == 200
    assert raw.headers["x-rein-outcome"] == "degraded"
    message = raw.parse()
    assert message.content[0].text == DEGRADED_TEXT
    assert message.model_extra["rein"]["outcome"] == "degraded"


def test_openai_sdk_streams_the_degraded_reply(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(
        model="down", messages=QUESTION, stream=True
    )
    assert raw.headers["x-rein-outcome"] == "degraded"
    chunks = list(raw.parse())
    text = openai_stream_text(chunks)
    assert text == DEGRADED_TEXT


def test_anthropic_sdk_streams_the_degraded_reply(claude: anthropic.Anthropic):
    with claude.messages.stream(model="down", max_tokens=200, messages=QUESTION) as stream:
        assert stream.response.headers["x-rein-outcome"] == "degraded"
        text = "".join(stream.text_stream)
    assert text == DEGRADED_TEXT
