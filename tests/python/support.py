"""Shared constants and small helpers for the official-SDK suite: the client key the test gateway
accepts, the simulator's end-of-answer sentinel, a question, and one tool in both SDKs' shapes."""

from __future__ import annotations

CLIENT_KEY = "sdk-suite-client-key"
ADMIN_KEY = "sdk-suite-admin-key"
POLICY_REASON = "sdk_suite_policy"
DEGRADED_TEXT = "The SDK suite's route is degraded: no tier answered."

# Every healthy simulator answer ends with this token.
SENTINEL = "[end]"

QUESTION = [{"role": "user", "content": "where is my order?"}]

ORDER_PARAMETERS = {
    "type": "object",
    "properties": {"order_id": {"type": "string", "description": "The order number."}},
    "required": ["order_id"],
}

OPENAI_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup_order",
            "description": "Look an order up by its id.",
            "parameters": ORDER_PARAMETERS,
        },
    }
]

ANTHROPIC_TOOLS = [
    {
        "name": "lookup_order",
        "description": "Look an order up by its id.",
        "input_schema": ORDER_PARAMETERS,
    }
]


def assert_sim_answer(text: str | None) -> None:
    """A complete healthy simulator answer: `sim answer <hex>: w1 … [end]`."""
    assert text is not None
    assert text.startswith("sim answer "), text
    assert text.endswith(SENTINEL), f"answer is not complete: {text!r}"


def openai_stream_text(chunks) -> str:
    """The text of OpenAI chat-completion chunks, joined."""
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


def openai_finish_reasons(chunks) -> list[str]:
    """Every `finish_reason` the chunks carry, in order."""
    return [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
