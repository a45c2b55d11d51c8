"""Fallback and degradation through both official SDKs. A route whose primary tier always fails
(`sim:529` on `fb-openai`, `sim:500` on `fb-anthropic`) still answers: the SDK gets a normal
response, `x-rein-outcome: fallback`, and a body `model` naming the backup tier's model. Each SDK
calls both routes, so one of each pair is cross-format (the OpenAI SDK served by an
Anthropic-format tier and the reverse), whole and streamed. A route where every tier fails
answers with its degraded reply, which both SDKs parse as an ordinary answer, whole and streamed."""

from __future__ import annotations

import json

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


# A degraded reply delivered as an error: each SDK raises its exception for a 503, carrying the
# decided text, so framework fallbacks that trigger only on an error (LangChain's
# `with_fallbacks`) can act.


def test_openai_sdk_raises_the_degraded_reply_delivered_as_an_error(oai: openai.OpenAI):
    with pytest.raises(openai.InternalServerError) as raised:
        oai.chat.completions.create(model="down-error", messages=QUESTION)
    assert raised.value.status_code == 503
    assert DEGRADED_TEXT in raised.value.message
    summary = raised.value.response.json()["rein"]
    assert summary["outcome"] == "degraded"
    assert summary["attempts"] >= 1, "the attempts behind the decision"


def test_anthropic_sdk_raises_the_degraded_reply_delivered_as_an_error(claude: anthropic.Anthropic):
    with pytest.raises(anthropic.InternalServerError) as raised:
        claude.messages.create(model="down-error", max_tokens=100, messages=QUESTION)
    assert raised.value.status_code == 503
    assert DEGRADED_TEXT in raised.value.message


def test_openai_sdk_stream_raises_the_degraded_reply_delivered_as_an_error(oai: openai.OpenAI):
    with pytest.raises(openai.InternalServerError) as raised:
        list(oai.chat.completions.create(model="down-error", messages=QUESTION, stream=True))
    assert DEGRADED_TEXT in raised.value.message


def test_a_caller_asking_for_json_never_gets_prose(oai: openai.OpenAI):
    # `down` has only a prose reply: a structured caller gets the error, not unparseable text.
    with pytest.raises(openai.InternalServerError) as raised:
        oai.chat.completions.create(
            model="down", messages=QUESTION, response_format={"type": "json_object"}
        )
    assert DEGRADED_TEXT in raised.value.message
    # `down-json` configures a schema-shaped object: the structured caller gets that.
    completion = oai.chat.completions.create(
        model="down-json", messages=QUESTION, response_format={"type": "json_object"}
    )
    assert json.loads(completion.choices[0].message.content) == {
        "reply": DEGRADED_TEXT,
        "reason": "outage",
    }
    # A prose caller on the same route still gets the text.
    prose = oai.chat.completions.create(model="down-json", messages=QUESTION)
    assert prose.choices[0].message.content == DEGRADED_TEXT


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_a_route_without_a_degraded_reply_names_the_misconfiguration(rein, sdk: str):
    # Every tier rejects rein's key and nothing promises a person: the caller is told what is
    # wrong, as a 502 from the gateway, never a made-up apology.
    if sdk == "openai":
        client = rein.openai_client()
        with pytest.raises(openai.APIStatusError) as raised:
            client.chat.completions.create(model="unconfigured", messages=QUESTION)
    else:
        client = rein.anthropic_client()
        with pytest.raises(anthropic.APIStatusError) as raised:
            client.messages.create(model="unconfigured", max_tokens=100, messages=QUESTION)
    assert raised.value.status_code == 502
    message = raised.value.message
    assert "misconfigured" in message and "401" in message, message
    assert "follow up" not in message and "A person" not in message
