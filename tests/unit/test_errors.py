"""Every error class declares typed context attributes; each is constructed, raised and
caught here, and survives pickling (errors cross worker and process boundaries)."""

from __future__ import annotations

import pickle
import typing
from datetime import UTC, datetime
from uuid import UUID, uuid4

import pytest

import contextledger as cl
import contextledger.domain.values.errors as errors

ERRORS = [getattr(errors, name) for name in errors.__all__]
SAMPLES: dict[str, object] = {
    "conversation_id": uuid4(),
    "argument": "version",
    "value": "'x'",
    "next_position": 7,
    "role": "tool",
    "position": 7,
    "field": "content",
    "tool_call_id": "call_1",
    "open_calls": ["call_1", "call_2"],
    "limit": 100,
    "tokens": 120,
    "version": 3,
    "key": "chat-7",
    "client_message_id": "req-7",
    "url": "postgresql://u:***@h/db",
    "setting": "poll_interval",
    "encoding": "o200k_base",
    "model": "gpt-4o-mini",
    "projection": "transcript",
    "known": ("transcript", "summaries"),
    "attempts": 4,
    "seconds": 2.5,
    "topic": "contextledger.conversation.Started",
    "tracked": 12,
    "head": 15,
    "from_position": 0,
    "through_position": 9,
    "pending": (10, 19),
    "retryable": False,
    "status": 429,
    "retry_after": 1.5,
    "cause": "server_unreachable",
    "size": 2_000_000,
    "unit": "bytes",
    "operation": "append",
    "table": "contextledger_events",
    "schema": "public",
    "subject": "user-42",
    "erased_at": datetime(2024, 5, 1, 12, 0, tzinfo=UTC),
    "reason": "the user asked to be forgotten",
    "key_id": "00112233445566778899aabbccddeeff",
}


@pytest.mark.parametrize("error_class", ERRORS, ids=lambda c: c.__name__)
def test_each_error_declares_typed_attributes_and_is_raised_and_caught(
    error_class: type[cl.ContextLedgerError],
) -> None:
    hints = typing.get_type_hints(error_class)
    fields = error_class._fields
    assert "conversation_id" in fields
    for name in fields:
        assert name in hints, f"{error_class.__name__}.{name} has no declared type"
        assert name in SAMPLES, f"add a sample value for {name}"
    context = {name: SAMPLES[name] for name in fields}
    with pytest.raises(cl.ContextLedgerError) as caught:
        raise error_class("it went wrong", **context)
    error = caught.value
    assert isinstance(error, error_class)
    for name, value in context.items():
        assert getattr(error, name) == value
    assert str(error).startswith("it went wrong")
    assert str(context["conversation_id"]) in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is error_class and copy.context == error.context and copy.message == error.message


@pytest.mark.parametrize("error_class", ERRORS, ids=lambda c: c.__name__)
def test_an_undeclared_attribute_is_a_programming_error(error_class: type[cl.ContextLedgerError]) -> None:
    with pytest.raises(TypeError, match="takes no context attribute"):
        error_class("oops", no_such_attribute=1)


def test_attributes_not_given_are_none_and_not_shown() -> None:
    error = cl.ConversationNotFoundError("no such conversation")
    assert error.conversation_id is None and error.version is None
    assert str(error) == "no such conversation"
    assert isinstance(uuid4(), UUID)


def test_usage_and_runtime_errors_are_apart() -> None:
    usage = {c for c in ERRORS if issubclass(c, cl.UsageError)}
    runtime = {c for c in ERRORS if issubclass(c, cl.ContextLedgerRuntimeError)}
    assert usage.isdisjoint(runtime)
    assert usage | runtime | {cl.ContextLedgerError, cl.UsageError, cl.ContextLedgerRuntimeError} >= set(ERRORS)
