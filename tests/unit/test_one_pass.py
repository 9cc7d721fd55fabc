"""From input to message in one pass: each kind of input an append takes is turned
into its ``Message`` by exactly one validation, and Responses items by one per
message they become (the step-by-step path validated most inputs twice, and a run of
assistant items once more per message item). Counted on ``Message``'s own validator,
through a real SQLite ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage

import contextledger as cl
from contextledger.application.formats.inbound import decode
from contextledger.domain.values.messages import Message


class _CountingValidator:
    """``Message``'s validator, counting the validations it runs."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.calls = inner, 0

    def validate_python(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.inner.validate_python(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def counter(monkeypatch: pytest.MonkeyPatch) -> _CountingValidator:
    counting = _CountingValidator(Message.__pydantic_validator__)
    monkeypatch.setattr(Message, "__pydantic_validator__", counting)
    return counting


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[cl.Ledger]:
    with cl.Ledger.open(f"sqlite:///{tmp_path / 'ledger.db'}", run_policy=False) as opened:
        yield opened


CALL = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
KINDS: dict[str, tuple[Any, int]] = {
    "text dict": ({"role": "user", "content": "hi"}, 1),
    "named dict": ({"role": "user", "content": "hi", "name": "bob"}, 1),
    "parts dict": ({"role": "user", "content": [{"type": "text", "text": "a"}]}, 1),
    "tool calls dict": ({"role": "assistant", "content": None, "tool_calls": [CALL], "refusal": None}, 1),
    "tool result dict": ({"role": "tool", "tool_call_id": "c1", "content": "r"}, 1),
    "sdk message": (ChatCompletionMessage.model_validate({"role": "assistant", "content": "ok"}), 1),
    "sdk completion": (
        ChatCompletion.model_validate(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 0,
                "model": "m",
                "choices": [
                    {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "y"}}
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
            }
        ),
        1,
    ),
    "completion dump": (
        {
            "object": "chat.completion",
            "choices": [{"message": {"role": "assistant", "content": "z", "annotations": [], "audio": None}}],
        },
        1,
    ),
    "message": (Message(role="user", content="built already"), 0),
}
#: Validations an append runs besides its message's: a tool result's placeholder
#: message, whose tokens the ledger counts.
BESIDES = {"tool result dict": 1}


def test_each_kind_of_append_validates_its_message_once(
    ledger: cl.Ledger, counter: _CountingValidator
) -> None:
    cid = ledger.start(system_prompt="s")
    seen = {}
    for name, (given, _) in KINDS.items():
        counter.calls = 0
        ledger.append(cid, given)
        seen[name] = counter.calls
    assert seen == {name: expected + BESIDES.get(name, 0) for name, (_, expected) in KINDS.items()}
    assert [m["role"] for m in ledger.context(cid)][-1] == "user"


def test_decoding_validates_each_message_once(counter: _CountingValidator) -> None:
    for given, expected in KINDS.values():
        counter.calls = 0
        assert len(decode(given).messages) == 1
        assert counter.calls == expected


ITEMS = [
    {"role": "user", "content": "question"},
    {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "plan"}]},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "a"}]},
    {"type": "reasoning", "id": "rs_2", "summary": []},
    {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "b"}]},
    {"type": "web_search_call", "id": "ws_1", "status": "completed"},
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "and now?"}]},
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
    {"type": "function_call", "call_id": "c2", "name": "g", "arguments": "{}"},
    {"type": "function_call_output", "call_id": "c1", "output": "one"},
    {"type": "function_call_output", "call_id": "c2", "output": "two"},
]


def test_appending_items_validates_each_message_they_become_once(
    ledger: cl.Ledger, counter: _CountingValidator
) -> None:
    cid = ledger.start(system_prompt="s")
    counter.calls = 0
    positions = ledger.append_items(cid, ITEMS)
    # the question; "a"; "b" with the search after it; the next question; the two
    # calls; their two outputs (and the placeholders of those, counted by the ledger)
    assert len(positions) == 7
    assert counter.calls == 7 + 2
    assert ledger.transcript_items(cid) == ITEMS
