"""Refusals surface through both official SDKs as their matching exception types, carrying rein's
message and rein's request id (`x-request-id` for OpenAI, `request-id` for Anthropic, both equal to
`x-rein-request-id`): a wrong key → AuthenticationError (401); an unknown route → NotFoundError
(404); bad input (`n=2`, a wrong-typed `temperature` via `extra_body`, an unknown role) →
BadRequestError (400) naming the field; a content-policy stop (primary `sim:content_policy`, whose
healthy fallback must not be used) → BadRequestError with the provider's reason, whole and
streamed; and a passthrough stream that breaks after its first tokens → the SDK's in-stream
error."""

from __future__ import annotations

import anthropic
import openai
import pytest

from support import POLICY_REASON, QUESTION


def assert_openai_request_id(error: openai.APIStatusError) -> None:
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert error.request_id == error.response.headers["x-rein-request-id"]
    assert error.response.headers["x-should-retry"] == "false"


def assert_anthropic_request_id(error: anthropic.APIStatusError) -> None:
    assert error.request_id is not None and error.request_id.startswith("req_")
    assert error.request_id == error.response.headers["x-rein-request-id"]
    assert error.response.headers["x-should-retry"] == "false"


# --- OpenAI SDK ---------------------------------------------------------------------------------


def test_openai_wrong_key_is_authentication_error(rein):
    client = rein.openai_client(api_key="not-a-rein-key")
    try:
        with pytest.raises(openai.AuthenticationError) as caught:
            client.chat.completions.create(model="chat", messages=QUESTION)
    finally:
        client.close()
    error = caught.value
    assert error.status_code == 401
    assert "Incorrect API key provided" in error.message
    assert error.code == "invalid_api_key"
    assert_openai_request_id(error)


def test_openai_wrong_key_on_models_list_is_authentication_error(rein):
    client = rein.openai_client(api_key="not-a-rein-key")
    try:
        with pytest.raises(openai.AuthenticationError) as caught:
            client.models.list()
    finally:
        client.close()
    assert "Incorrect API key provided" in caught.value.message


def test_openai_unknown_route_is_not_found(oai: openai.OpenAI):
    with pytest.raises(openai.NotFoundError) as caught:
        oai.chat.completions.create(model="no-such-route", messages=QUESTION)
    error = caught.value
    assert error.status_code == 404
    assert "no route named `no-such-route`" in error.message
    assert error.code == "model_not_found"
    assert error.param == "model"
    assert_openai_request_id(error)


def test_openai_unknown_route_streaming_is_not_found(oai: openai.OpenAI):
    with pytest.raises(openai.NotFoundError) as caught:
        oai.chat.completions.create(model="no-such-route", messages=QUESTION, stream=True)
    assert "no route named `no-such-route`" in caught.value.message
    assert_openai_request_id(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "param", "needle"),
    [
        ({"n": 2}, "n", "`n`: only 1 choice is supported, got 2"),
        (
            {"extra_body": {"temperature": "hot"}},
            "temperature",
            '`temperature`: invalid type: string "hot", expected a number',
        ),
        (
            {"messages": [{"role": "robot", "content": "hi"}]},
            "messages[0].role",
            "`messages[0].role`: unknown variant `robot`",
        ),
        ({"messages": []}, "messages", "`messages`: must contain at least one message"),
    ],
    ids=["n=2", "temperature-type", "unknown-role", "no-messages"],
)
def test_openai_bad_input_is_bad_request_naming_the_field(
    oai: openai.OpenAI, kwargs: dict, param: str, needle: str
):
    request = {"model": "chat", "messages": QUESTION, **kwargs}
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(**request)
    error = caught.value
    assert error.status_code == 400
    assert needle in error.message
    assert error.param == param
    assert error.type == "invalid_request_error"
    assert_openai_request_id(error)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_content_policy_is_bad_request_with_the_providers_reason(
    oai: openai.OpenAI, stream: bool
):
    with pytest.raises(openai.BadRequestError) as caught:
        oai.chat.completions.create(model="policy", messages=QUESTION, stream=stream)
    error = caught.value
    assert "rejected by the provider's content policy" in error.message
    assert POLICY_REASON in error.message
    assert error.code == "content_policy_violation"
    assert error.response.headers["x-rein-outcome"] == "stopped"
    # The call stopped: the healthy fallback tier was not asked.
    assert "x-rein-model" not in error.response.headers
    assert_openai_request_id(error)


def test_openai_interrupted_passthrough_stream_raises_in_stream(oai: openai.OpenAI):
    received = []
    with pytest.raises(openai.APIError) as caught:
        for chunk in oai.chat.completions.create(
            model="interrupted", messages=QUESTION, stream=True
        ):
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
    assert not isinstance(caught.value, openai.APIStatusError), "headers were already sent"
    assert "the stream failed after it started" in caught.value.message
    assert received, "the first tokens were passed through before the failure"


# --- Anthropic SDK ------------------------------------------------------------------------------


def test_anthropic_wrong_key_is_authentication_error(rein):
    client = rein.anthropic_client(api_key="not-a-rein-key")
    try:
        with pytest.raises(anthropic.AuthenticationError) as caught:
            client.messages.create(model="claude", max_tokens=50, messages=QUESTION)
    finally:
        client.close()
    error = caught.value
    assert error.status_code == 401
    assert error.type == "authentication_error"
    assert "invalid x-api-key" in error.api_message
    assert_anthropic_request_id(error)


def test_anthropic_unknown_route_is_not_found(claude: anthropic.Anthropic):
    with pytest.raises(anthropic.NotFoundError) as caught:
        claude.messages.create(model="no-such-route", max_tokens=50, messages=QUESTION)
    error = caught.value
    assert error.status_code == 404
    assert error.type == "not_found_error"
    assert error.api_message == "no route named `no-such-route`"
    assert_anthropic_request_id(error)


def test_anthropic_unknown_route_streaming_is_not_found(claude: anthropic.Anthropic):
    with pytest.raises(anthropic.NotFoundError) as caught:
        with claude.messages.stream(
            model="no-such-route", max_tokens=50, messages=QUESTION
        ) as stream:
            stream.get_final_message()
    assert caught.value.api_message == "no route named `no-such-route`"
    assert_anthropic_request_id(caught.value)


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        (
            {"messages": [{"role": "robot", "content": "hi"}]},
            "`messages[0].role`: unknown variant `robot`",
        ),
        (
            {"extra_body": {"temperature": "hot"}},
            '`temperature`: invalid type: string "hot", expected a number',
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [{"type": "tool_use", "id": "t", "name": "x", "input": {}}],
                    }
                ]
            },
            "`messages[0].content[0].type`: `tool_use` blocks belong to assistant messages",
        ),
        ({"messages": []}, "`messages`: must contain at least one message"),
    ],
    ids=["unknown-role", "temperature-type", "tool-use-in-user-turn", "no-messages"],
)
def test_anthropic_bad_input_is_bad_request_naming_the_field(
    claude: anthropic.Anthropic, kwargs: dict, needle: str
):
    request = {"model": "claude", "max_tokens": 50, "messages": QUESTION, **kwargs}
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(**request)
    error = caught.value
    assert error.status_code == 400
    assert error.type == "invalid_request_error"
    assert needle in error.api_message
    assert_anthropic_request_id(error)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_content_policy_is_bad_request_with_the_providers_reason(
    claude: anthropic.Anthropic, stream: bool
):
    with pytest.raises(anthropic.BadRequestError) as caught:
        claude.messages.create(model="policy", max_tokens=50, messages=QUESTION, stream=stream)
    error = caught.value
    assert error.type == "invalid_request_error"
    assert "rejected by the provider's content policy" in error.api_message
    assert POLICY_REASON in error.api_message
    assert error.body["rein"]["outcome"] == "stopped"
    assert "x-rein-model" not in error.response.headers
    assert_anthropic_request_id(error)


def test_anthropic_interrupted_passthrough_stream_raises_in_stream(claude: anthropic.Anthropic):
    received = []
    with pytest.raises(anthropic.APIStatusError) as caught:
        for event in claude.messages.create(
            model="interrupted", max_tokens=100, messages=QUESTION, stream=True
        ):
            if event.type == "content_block_delta":
                received.append(event.delta.text)
    assert "the stream failed after it started" in caught.value.api_message
    assert received, "the first tokens were passed through before the failure"
