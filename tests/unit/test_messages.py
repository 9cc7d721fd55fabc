"""Message value objects: OpenAI-format dicts in and out, bad shapes rejected."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from contextledger.domain import InvalidMessageError, Message
from contextledger.domain.values.messages import FunctionCall, ToolCall

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


def _dumped(message: Message) -> str:
    """The canonical JSON as digests were always computed: ``to_openai()`` dumped."""
    return json.dumps(message.to_openai(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


@settings(max_examples=300, deadline=None)
@given(
    role=st.sampled_from(["system", "developer", "user", "assistant"]),
    content=st.text().filter(lambda t: t.strip() and not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
)
def test_the_canonical_json_of_a_text_message_is_the_dumped_dict(role: str, content: str) -> None:
    # text messages take a shorter path; digests (and verify over stored logs) need the same text
    message = Message(role=role, content=content)  # type: ignore[arg-type]
    assert message.canonical_json() == _dumped(message)


@pytest.mark.parametrize("message", [
    Message(role="assistant", content="x", name="bot"),
    Message(role="assistant", content=None, tool_calls=(ToolCall(id="c1", function=FunctionCall(name="f", arguments="{}")),)),
    Message(role="tool", content="é \u2028 \x00 \"q\"", tool_call_id="c1"),
    Message(role="user", content=({"type": "text", "text": "hi"},)),
    Message(role="user", content="line\nbreak\t\\ \U0001f600"),
], ids=["name", "tool-calls", "tool", "parts", "escapes"])
def test_the_canonical_json_of_every_other_shape_is_the_dumped_dict(message: Message) -> None:
    assert message.canonical_json() == _dumped(message)
