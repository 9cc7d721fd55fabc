"""The summary request the provider summarizers' tests send: a seat change, its tool
call and the tool's answer, with the summary so far."""

from __future__ import annotations

from uuid import uuid4

from contextledger.application import SummaryRequest
from contextledger.domain import Message

SEAT_CHANGE = (
    {"role": "user", "content": "Change my seat to a window seat."},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c9", "type": "function", "function": {"name": "set_seat", "arguments": '{"seat": "12A"}'}}
        ],
    },
    {"role": "tool", "tool_call_id": "c9", "content": "seat 12A confirmed"},
)


def seat_change_request(*, model: str, previous: str | None) -> SummaryRequest:
    """Positions 40 to 42 of a new conversation: ``SEAT_CHANGE``, for ``model``."""
    return SummaryRequest(
        conversation_id=uuid4(),
        from_position=40,
        through_position=42,
        messages=tuple(Message.from_openai(m) for m in SEAT_CHANGE),
        previous_summary=previous,
        model=model,
        max_summary_tokens=300,
        idempotency_key="conv:17",
    )
