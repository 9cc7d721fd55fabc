"""Every event survives the mapper; old schemas upcast; bad bytes give StoreError."""

from __future__ import annotations

import base64
import json
import math
import os
from datetime import UTC, datetime
from typing import Any, ClassVar
from uuid import uuid4

import pytest
from eventsourcing.cipher import AESCipher
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.persistence import StoredEvent
from eventsourcing.utils import Environment
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from contextledger.domain import ClientMessageId, Conversation, Message, ReductionPolicy, StoreError
from contextledger.domain.conversation import (
    ConversationSnapshot,
    ConversationState,
    SummaryProvenance,
)
from contextledger.domain.events import DomainEvent, ForkOrigin
from contextledger.domain.values.reduction import Entry, SummaryLayer, SummaryLink
from contextledger.infrastructure.keys.mapper import JSONBytesTranscoder, PydanticMapper

AT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
CID = uuid4()
POLICY = ReductionPolicy(trigger_messages=10, keep_messages=2, keep_tool_results=3)
TOOL_CALL = Message.from_openai(
    {"role": "assistant", "content": "let me see", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": "é"}'}}]}
)


def envelope(version: int) -> dict[str, Any]:
    return {"originator_id": CID, "originator_version": version, "timestamp": AT}


EVENTS: list[DomainEvent] = [
    Conversation.Started(**envelope(1), system_prompt="sys", system_tokens=5, model="gpt-4o",
                         policy=POLICY, digest="0" * 64),
    Conversation.MessageAppended(**envelope(2), position=0, message=TOOL_CALL, tokens=20,
                                 client_message_id="client-1", digest="1" * 64),
    Conversation.MessageAppended(**envelope(3), position=1,
                                 message=Message(role="tool", tool_call_id="c1", content="ok"),
                                 tokens=7, placeholder_tokens=12, digest="2" * 64),
    Conversation.ThresholdReached(**envelope(4), limit="messages", unsummarized_messages=11,
                                  unsummarized_tokens=300, from_position=0, through_position=8,
                                  from_version=2, through_version=10, policy_version=1),
    Conversation.SummaryCreated(**envelope(5), from_position=0, through_position=8, covers_from=0,
                                text="s", tokens=1, message_tokens=20, source_digest="3" * 64,
                                threshold_version=4, provenance=SummaryProvenance(
                                    model="m", prompt_version="v", input_tokens=3, output_tokens=1,
                                    latency_ms=2.5), policy_version=1),
    Conversation.SummarizationFailed(**envelope(6), threshold_version=4, from_position=0,
                                     through_position=8, kind="timeout", error="slow", attempt=1,
                                     retryable=True),
    Conversation.PolicyChanged(**envelope(7), policy=ReductionPolicy(), policy_version=2),
    Conversation.UsageRecorded(**envelope(8), through_position=1, prompt_tokens=40,
                               completion_tokens=5, estimated_prompt_tokens=41),
    Conversation.MessagesRetracted(**envelope(9), positions=(0, 1), command="retract", reason="typo",
                                   tokens=27, digest="4" * 64),
    Conversation.MessageEdited(**envelope(10), position=1,
                               message=Message(role="tool", tool_call_id="c1", content="ok!"), tokens=8,
                               placeholder_tokens=12, replaces_version=3, replaced_tokens=7, digest="5" * 64),
    Conversation.SystemPromptChanged(**envelope(11), system_prompt="new", system_tokens=4, digest="6" * 64),
    Conversation.SummaryInvalidated(
        **envelope(12), reason="edited", trigger_version=10, invalidated_versions=(5,),
        layers=(SummaryLayer(from_position=0, through_position=2, text="s", message_tokens=9,
                             link=SummaryLink(version=4, from_position=0, through_position=2,
                                              message_tokens=9)),),
        reopened=(Entry(position=3, version=6, message=Message(role="user", content="é"), tokens=5),)),
    Conversation.Forked(**envelope(1), origin=ForkOrigin(conversation_id=CID, version=8, through_position=1),
                        key="k", state=ConversationState(system_prompt=None, system_tokens=0, model="m",
                                                         policy=POLICY, digest="d").model_dump(mode="json"),
                        digest="d"),
    ClientMessageId.Recorded(**envelope(1), conversation_id=CID, client_message_id="x", position=3),
    ConversationSnapshot(**envelope(3), created_on=AT, state=ConversationState(
        system_prompt=None, system_tokens=0, model="m", policy=POLICY, digest="d")),
]


def mapper(**kwargs: Any) -> PydanticMapper:
    return PydanticMapper(transcoder=JSONBytesTranscoder(), **kwargs)


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: type(e).__name__)
def test_each_event_type_round_trips_through_the_mapper(event: DomainEvent) -> None:
    stored = mapper().to_stored_event(event)
    assert stored.topic == type(event).TOPIC
    assert mapper().to_domain_event(stored) == event


@pytest.mark.parametrize("event", EVENTS[:3], ids=lambda e: type(e).__name__)
def test_events_round_trip_compressed_and_encrypted(event: DomainEvent) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    cipher = AESCipher(Environment(env={"CIPHER_KEY": key}))
    m = mapper(compressor=ZlibCompressor(), cipher=cipher)
    stored = m.to_stored_event(event)
    assert b"sys" not in stored.state and b"let me see" not in stored.state
    assert m.to_domain_event(stored) == event


def test_every_event_class_pins_a_unique_topic() -> None:
    topics = [type(e).TOPIC for e in EVENTS]
    assert all(t.startswith("contextledger.") for t in topics)
    assert len(set(topics)) == len({type(e) for e in EVENTS})


class Noted(DomainEvent):
    """A test event at schema version 3: v1 had no ``note``, v2 called it ``remark``."""

    TOPIC: ClassVar[str] = "tests.events.Noted"
    class_version: ClassVar[int] = 3
    note: str
    weight: int

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["remark"] = "(none)"

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        state["note"] = state.pop("remark")
        state.setdefault("weight", 1)


def test_an_old_stored_event_is_upcast_to_the_current_schema() -> None:
    v1 = StoredEvent(originator_id=CID, originator_version=1, topic="tests.events.Noted",
                     state=b'{"timestamp": "2026-01-01T00:00:00+00:00"}')
    event = mapper().to_domain_event(v1)
    assert isinstance(event, Noted) and event.note == "(none)" and event.weight == 1
    stored = mapper().to_stored_event(event)
    assert b'"class_version":3' in stored.state
    assert mapper().to_domain_event(stored) == event


@pytest.mark.parametrize(
    ("topic", "state", "fragment"),
    [
        ("contextledger.conversation.Started", b"{not json", "cannot decode"),
        ("contextledger.conversation.Started", b'{"timestamp": "2026-01-01T00:00:00Z"}', "does not fit"),
        ("no.such.module:Thing", b"{}", "unknown event topic"),
    ],
)
def test_an_undecodable_event_raises_a_store_error_naming_where(topic: str, state: bytes, fragment: str) -> None:
    stored = StoredEvent(originator_id=CID, originator_version=7, topic=topic, state=state)
    with pytest.raises(StoreError) as caught:
        mapper().to_domain_event(stored)
    assert fragment in str(caught.value)
    assert str(CID) in str(caught.value) and "version 7" in str(caught.value)


def test_decrypting_with_the_wrong_key_is_a_store_error() -> None:
    def cipher() -> AESCipher:
        return AESCipher(Environment(env={"CIPHER_KEY": base64.b64encode(os.urandom(32)).decode()}))

    stored = mapper(cipher=cipher()).to_stored_event(EVENTS[0])
    with pytest.raises(StoreError, match="cannot decode"):
        mapper(cipher=cipher()).to_domain_event(stored)


def written_before(event: DomainEvent) -> bytes:
    """The bytes every log so far was written with: dumped to Python values, then
    ``json.dumps``."""
    state = event.model_dump(mode="json", exclude={"originator_id", "originator_version"})
    if getattr(type(event), "class_version", 1) > 1:
        state["class_version"] = type(event).class_version  # type: ignore[attr-defined]
    return json.dumps(state, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


NON_FINITE: list[DomainEvent] = [
    Conversation.Started(**envelope(1), system_prompt="sys", system_tokens=5, model="gpt-4o", policy=POLICY,
                         digest="0" * 64, tools=({"type": "function", "function": {
                             "name": "f", "parameters": {"type": "number", "maximum": math.inf,
                                                         "minimum": -math.inf, "default": math.nan}}},)),
    Conversation.MessageAppended(**envelope(2), position=0, message=Message(role="user", content="x"),
                                 tokens=1, digest="1" * 64, items=({"type": "message", "score": math.nan},)),
    Conversation.SummaryCreated(**envelope(5), from_position=0, through_position=8, covers_from=0,
                                text="s", tokens=1, message_tokens=20, source_digest="3" * 64,
                                threshold_version=4, policy_version=1, provenance=SummaryProvenance(
                                    model="m", prompt_version="v", latency_ms=math.inf)),
    Noted(**envelope(1), note="n", weight=2),
]


@pytest.mark.parametrize("event", EVENTS + NON_FINITE, ids=lambda e: type(e).__name__)
def test_the_mapper_writes_the_bytes_logs_were_always_written_with(event: DomainEvent) -> None:
    # pydantic-core writes the JSON in one pass; NaN and infinities stay JSON's
    # extension constants in every model (pydantic's default would write null)
    assert mapper().to_stored_event(event).state == written_before(event)


@settings(max_examples=200, deadline=None)
@given(st.text(), st.floats(), st.dictionaries(st.text(), st.floats() | st.text() | st.none(), max_size=3))
def test_any_text_and_float_is_written_as_the_same_json_values(text: str, number: float, extra: dict[str, Any]) -> None:
    # lone surrogates never reach an event: validation refuses them first
    assume(not any(0xD800 <= ord(ch) <= 0xDFFF for ch in text + "".join(extra)))
    events: list[DomainEvent] = [
        Conversation.MessageAppended(**envelope(2), position=0, message=Message(role="user", content=text or "x"),
                                     tokens=1, digest="1" * 64, items=({"type": text, "n": number, **extra},)),
        Conversation.SummaryCreated(**envelope(5), from_position=0, through_position=8, covers_from=0,
                                    text=text, tokens=1, message_tokens=20, source_digest="3" * 64,
                                    threshold_version=4, policy_version=1, provenance=SummaryProvenance(
                                        model=text, prompt_version="v", latency_ms=number)),
    ]
    for event in events:
        # the same JSON values (a float may be spelled differently: 3.4e-05 or 0.000034)
        stored = mapper().to_stored_event(event)
        assert canonical(stored.state) == canonical(written_before(event))
        assert canonical(mapper().to_stored_event(mapper().to_domain_event(stored)).state) == canonical(
            stored.state)


def canonical(data: bytes) -> str:
    return json.dumps(json.loads(data), sort_keys=True)


def test_every_domain_model_keeps_non_finite_floats_as_json_constants() -> None:
    import contextledger.domain as domain

    models = {cls for name in dir(domain) if isinstance(cls := getattr(domain, name), type)
              and issubclass(cls, BaseModel)}
    models |= {sub for cls in list(models) for sub in cls.__subclasses__()}
    assert len(models) > 15
    assert {m.__name__ for m in models if m.model_config.get("ser_json_inf_nan") != "constants"} == set()


@pytest.mark.parametrize("hidden", [False, True])
def test_a_window_entry_dumps_hidden_only_when_set(hidden: bool) -> None:
    # Snapshots store entries as they always did: no "hidden" key unless it is True.
    message = Message(role="tool", tool_call_id="c1", content="é \u2028 result")
    entry = Entry(position=3, version=4, message=message, tokens=7, placeholder_tokens=2, hidden=hidden)
    expected: dict[str, Any] = {
        "position": 3,
        "version": 4,
        "message": message.model_dump(),
        "tokens": 7,
        "placeholder_tokens": 2,
        "tool_name": None,
        "items": None,
        "original": None,
    }
    if hidden:
        expected["hidden"] = True
    assert entry.model_dump() == expected
    assert list(entry.model_dump(mode="json")) == list(expected)
    assert entry.model_dump_json() == json.dumps(expected, separators=(",", ":"), ensure_ascii=False)
    state = ConversationState(system_prompt=None, system_tokens=0, model="m", policy=POLICY, digest="d")
    state.window = [entry]
    assert ('"hidden":true' in state.model_dump_json()) is hidden
