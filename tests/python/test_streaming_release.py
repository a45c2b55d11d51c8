"""Streaming through both release modes with both official SDKs: a `passthrough` route (tokens
forwarded as they arrive, `x-rein-release: passthrough`) and a `checked` route (the whole answer
held until complete, the outcome known in the headers) each deliver the complete simulator text
ending with `[end]`. The passthrough tier speaks OpenAI's format and the checked tier Anthropic's,
so each SDK also streams across formats."""

from __future__ import annotations

import anthropic
import openai
import pytest

from support import QUESTION, assert_sim_answer, openai_finish_reasons

ROUTES = ["passthrough", "checked"]


def assert_release_headers(headers, route: str) -> None:
    if route == "passthrough":
        assert headers["x-rein-release"] == "passthrough"
    else:
        assert "x-rein-release" not in headers
        # Held until complete, so the outcome is known before the first byte.
        assert headers["x-rein-outcome"] == "answered"


@pytest.mark.parametrize("route", ROUTES)
def test_openai_sdk_streams_the_whole_answer(oai: openai.OpenAI, route: str):
    raw = oai.chat.completions.with_raw_response.create(
        model=route, messages=QUESTION, stream=True, stream_options={"include_usage": True}
    )
    assert_release_headers(raw.headers, route)
    chunks = list(raw.parse())
    pieces = [c.choices[0].delta.content for c in chunks if c.choices]
    pieces = [piece for piece in pieces if piece]
    text = "".join(pieces)
    assert_sim_answer(text)
    if route == "passthrough":
        assert len(pieces) > 5, "passthrough forwards the provider's tokens one by one"
    finish = openai_finish_reasons(chunks)
    assert finish == ["stop"]
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens > 0


@pytest.mark.parametrize("route", ROUTES)
def test_openai_sdk_stream_helper_collects_the_whole_answer(oai: openai.OpenAI, route: str):
    with oai.chat.completions.stream(model=route, messages=QUESTION) as stream:
        deltas = [event.delta for event in stream if event.type == "content.delta"]
        completion = stream.get_final_completion()
    assert_sim_answer("".join(deltas))
    assert completion.choices[0].message.content == "".join(deltas)


@pytest.mark.parametrize("route", ROUTES)
def test_anthropic_sdk_stream_helper_collects_the_whole_answer(
    claude: anthropic.Anthropic, route: str
):
    with claude.messages.stream(model=route, max_tokens=200, messages=QUESTION) as stream:
        assert_release_headers(stream.response.headers, route)
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert_sim_answer(text)
    assert final.content[0].text == text
    assert final.stop_reason == "end_turn"


@pytest.mark.parametrize("route", ROUTES)
def test_anthropic_sdk_stream_true_delivers_the_whole_answer(
    claude: anthropic.Anthropic, route: str
):
    events = list(
        claude.messages.create(model=route, max_tokens=200, messages=QUESTION, stream=True)
    )
    assert events[0].type == "message_start"
    assert events[-1].type == "message_stop"
    deltas = [e.delta.text for e in events if e.type == "content_block_delta"]
    assert_sim_answer("".join(deltas))
    if route == "passthrough":
        assert len(deltas) > 5, "passthrough forwards the provider's tokens one by one"
