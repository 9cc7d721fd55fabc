"""New optional fields (the key, tools, summary placement) keep old logs loading as
they were written, and the new events round-trip through the mapper."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from uuid import uuid4

from eventsourcing.persistence import StoredEvent

from contextledger.domain import Conversation, Message, ReductionPolicy
from contextledger.domain.events import DomainEvent, Started, ToolsChanged
from contextledger.infrastructure.keys.mapper import JSONBytesTranscoder, PydanticMapper

CID = uuid4()
AT = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
TOOL = {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}}}


def mapper() -> PydanticMapper:
    return PydanticMapper(transcoder=JSONBytesTranscoder())


def test_a_started_event_stored_before_keys_tools_and_placement_loads_with_their_defaults() -> None:
    old_state = {
        "timestamp": AT.isoformat(), "system_prompt": "sys", "system_tokens": 5, "model": "gpt-4o-mini",
        "policy": {"trigger_messages": 4, "keep_messages": 1, "keep_tokens": None, "trigger_tokens": None,
                   "summary_mode": "single", "layered_max_tokens": 2000, "keep_tool_results": None,
                   "max_context_tokens": None, "summarizer_model": None, "max_summary_tokens": 1000},
        "reply_priming": 3, "digest": "0" * 64,
    }
    stored = StoredEvent(originator_id=CID, originator_version=1, topic=Started.TOPIC,
                         state=json.dumps(old_state).encode())
    event = mapper().to_domain_event(stored)
    assert isinstance(event, Started)
    assert (event.key, event.tools, event.tools_tokens) == (None, None, 0)
    assert event.policy.summary_placement == "system_message"
    conversation = Conversation.apply(None, event)
    messages, tokens = conversation.working_memory()
    assert messages == [Message(role="system", content="sys")] and tokens == 8


def test_the_new_fields_and_tools_changed_round_trip_through_the_mapper() -> None:
    events: list[DomainEvent] = [
        Started(originator_id=CID, originator_version=1, timestamp=AT, system_prompt=None, system_tokens=0,
                model="gpt-4o", policy=ReductionPolicy(),
                digest="0" * 64, key="chat-7", tools=(TOOL,), tools_tokens=30),
        ToolsChanged(originator_id=CID, originator_version=2, timestamp=AT, tools=None, tools_tokens=0),
    ]
    for event in events:
        assert mapper().to_domain_event(mapper().to_stored_event(event)) == event
