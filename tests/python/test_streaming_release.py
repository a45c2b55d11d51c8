"""Streaming through both release modes with both official SDKs: a `passthrough` route (tokens
forwarded as they arrive, `x-rein-release: passthrough`) and a `checked` route (the whole answer
held until complete, the outcome known in the headers) each deliver the complete simulator text
ending with `[end]`. The passthrough tier speaks OpenAI's format and the checked tier Anthropic's,
so each SDK also streams across formats."""

from __future__ import annotations

import anthropic
import openai
import pytest

import time

import httpx2 as httpx

from support import CLIENT_KEY, QUESTION, assert_sim_answer, openai_finish_reasons

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


def test_a_held_stream_sends_its_first_byte_while_rein_retries(rein):
    started = time.monotonic()
    with httpx.stream(
        "POST",
        rein.openai_base_url + "/chat/completions",
        headers={"Authorization": f"Bearer {CLIENT_KEY}"},
        json={"model": "held", "messages": QUESTION, "stream": True},
        timeout=30,
    ) as response:
        chunks = response.iter_raw()
        first = next(chunks)
        first_at = time.monotonic() - started
        rest = b"".join(chunks)
    assert response.status_code == 200
    assert first.startswith(b": keep-alive"), first
    # The primary's first attempt alone needs 1 s to fail.
    assert first_at < 1.0, first_at
    assert rest.rstrip().endswith(b"data: [DONE]")


@pytest.mark.parametrize("sdk", ["openai", "anthropic"])
def test_an_sdk_with_a_read_timeout_shorter_than_the_hold_gets_the_answer(rein, sdk: str):
    # Held about 2 s; the client gives up after 0.8 s without a byte. The keep-alive comments
    # keep it reading, and the SDK's stream parser skips them.
    timeout = httpx.Timeout(10.0, read=0.8)
    if sdk == "openai":
        client = rein.openai_client().with_options(timeout=timeout)
        stream = client.chat.completions.create(model="held", messages=QUESTION, stream=True)
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    else:
        client = rein.anthropic_client().with_options(timeout=timeout)
        with client.messages.stream(model="held", max_tokens=200, messages=QUESTION) as stream:
            text = "".join(stream.text_stream)
    assert_sim_answer(text)


def test_without_the_keepalive_that_sdk_times_out(rein):
    client = rein.openai_client().with_options(timeout=httpx.Timeout(10.0, read=0.8))
    with pytest.raises(openai.APITimeoutError):
        stream = client.chat.completions.create(model="held-quiet", messages=QUESTION, stream=True)
        list(stream)
