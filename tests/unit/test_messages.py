"""Message value objects: OpenAI-format dicts in and out, bad shapes rejected."""

from __future__ import annotations

from typing import Any

import pytest

from contextledger.domain import InvalidMessageError, Message

CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"q": 1}'}}

VALID: list[dict[str, Any]] = [
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "internal rules"},
    {"role": "user", "content": "hi", "name": "alice"},
    {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "data:x"}}]},
    {"role": "assistant", "content": "hello"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "assistant", "content": "checking", "tool_calls": [CALL]},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    {"role": "tool", "tool_call_id": "call_1", "content": '{"ok": true}'},
    {"role": "tool", "tool_call_id": "call_1", "content": [{"type": "text", "text": "ok"}]},
]


@pytest.mark.parametrize("data", VALID, ids=lambda d: d["role"])
def test_a_valid_openai_message_round_trips_unchanged(data: dict[str, Any]) -> None:
    assert Message.from_openai(data).to_openai() == data


INVALID: list[tuple[Any, str]] = [
    ("hello", "must be a dict"),
    ({"role": "robot", "content": "x"}, "role must be one of"),
    ({"content": "x"}, "role must be one of"),
    ({"role": "user", "content": "x", "extra": 1}, "unknown message keys"),
    ({"role": "user"}, "content may be null only"),
    ({"role": "user", "content": None}, "content may be null only"),
    ({"role": "user", "content": 5}, "content"),
    ({"role": "user", "content": []}, "must not be empty"),
    ({"role": "user", "content": [{"text": "no type"}]}, "type"),
    ({"role": "system", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}, "text content parts"),
    ({"role": "tool", "content": "x"}, "tool_call_id"),
    ({"role": "tool", "content": "x", "tool_call_id": "c", "name": "f"}, "name"),
    ({"role": "user", "content": "x", "tool_call_id": "c"}, "only tool messages"),
    ({"role": "user", "content": "x", "tool_calls": [CALL]}, "only assistant"),
    ({"role": "assistant", "content": None}, "content may be null only"),
    ({"role": "assistant", "content": None, "tool_calls": []}, "must not be empty"),
    ({"role": "assistant", "content": None, "tool_calls": [CALL, CALL]}, "unique"),
    (
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": {"name": "bad name!", "arguments": "{}"}}]},
        "function name",
    ),
    (
        {"role": "assistant", "content": None, "tool_calls": [{**CALL, "function": {"name": "f", "arguments": {"a": 1}}}]},
        "arguments",
    ),
    ({"role": "user", "content": "x", "name": ""}, "name"),
]


@pytest.mark.parametrize(("data", "fragment"), INVALID, ids=[str(i) for i in range(len(INVALID))])
def test_a_malformed_message_gets_an_invalid_message_error_that_says_why(data: Any, fragment: str) -> None:
    with pytest.raises(InvalidMessageError) as caught:
        Message.from_openai(data)
    assert fragment in str(caught.value)


def test_a_message_is_frozen() -> None:
    message = Message.from_openai({"role": "user", "content": "hi"})
    with pytest.raises(Exception, match="frozen"):
        message.content = "changed"  # type: ignore[misc]


def test_to_openai_returns_a_fresh_copy_each_time() -> None:
    message = Message.from_openai(VALID[3])
    first = message.to_openai()
    first["content"].append({"type": "text", "text": "mutated"})
    assert message.to_openai() == VALID[3]
