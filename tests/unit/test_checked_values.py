"""Values a validated event already holds are not validated again, and come out the same."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import MESSAGES_CHECKED, Message
from contextledger.domain.values.reduction import Entry

MESSAGES = [
    Message(role="user", content="hi"),
    Message(role="assistant", content="hello", name="bot"),
    Message(role="tool", tool_call_id="call_1", content='{"ok": true}'),
]


@pytest.mark.parametrize("message", MESSAGES)
@pytest.mark.parametrize("hidden", [False, True])
def test_an_entry_of_checked_values_is_the_validated_entry(message: Message, hidden: bool) -> None:
    fields: dict[str, Any] = {
        "position": 4,
        "version": 7,
        "message": message,
        "tokens": 12,
        "placeholder_tokens": 3 if message.role == "tool" else None,
        "tool_name": "lookup" if message.role == "tool" else None,
    }
    validated = Entry(**fields, items=None, original=None, hidden=hidden)
    checked = Entry.of_checked(**fields, hidden=hidden)
    assert checked == validated
    assert checked.__dict__ == validated.__dict__
    assert list(checked.__dict__) == list(validated.__dict__)
    assert checked.model_fields_set == validated.model_fields_set
    assert checked.model_dump_json() == validated.model_dump_json()
    assert checked.model_dump(mode="json") == validated.model_dump(mode="json")
    with pytest.raises(ValidationError):  # frozen as the validated one
        checked.tokens = 1  # type: ignore[misc]


def test_a_message_built_from_its_fields_is_checked_whatever_the_context() -> None:
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        Message(role="tool", content="x")
    with pytest.raises(InvalidMessageError, match="tool_call_id"):
        Message.model_validate({"role": "tool", "content": "x"})
    # A message given as one under MESSAGES_CHECKED is taken as it is (it was checked).
    message = MESSAGES[0]
    assert Message.model_validate(message, context=MESSAGES_CHECKED) is message
