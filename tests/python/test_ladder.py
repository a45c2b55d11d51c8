"""The validation ladder through the official `openai` SDK with `response_format: json_schema`:
rein checks the caller's schema itself, even though the provider decoded with it. An enum in the
wrong letter case is repaired in code with no second call; an answer missing a required field is
asked again once, naming the problem, and the second answer is used."""

from __future__ import annotations

import json

import openai

from conftest import GOOD_REFUND

SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "refund",
        "strict": True,
        "schema": {
            "type": "object",
            "additionalProperties": False,
            "required": ["order_id", "reason"],
            "properties": {
                "order_id": {"type": "string"},
                "reason": {"type": "string", "enum": ["refund", "delivery", "other"]},
            },
        },
    },
}
QUESTION = [{"role": "user", "content": "Refund order A10234, the flowers arrived wilted."}]


def test_enum_case_is_repaired_in_code_without_a_second_call(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(
        model="ladder-repair", messages=QUESTION, response_format=SCHEMA
    )
    assert raw.headers["x-rein-repairs"] == "1"
    assert raw.headers["x-rein-attempts"] == "1"
    assert raw.headers["x-rein-reasks"] == "0"
    answer = json.loads(raw.parse().choices[0].message.content)
    assert answer == {"order_id": "A10234", "reason": "refund"}


def test_a_missing_required_field_is_asked_again_once(oai: openai.OpenAI):
    raw = oai.chat.completions.with_raw_response.create(
        model="ladder-reask", messages=QUESTION, response_format=SCHEMA
    )
    assert raw.headers["x-rein-reasks"] == "1"
    assert raw.headers["x-rein-attempts"] == "2"
    assert raw.headers["x-rein-outcome"] == "answered"
    assert json.loads(raw.parse().choices[0].message.content) == json.loads(GOOD_REFUND)
