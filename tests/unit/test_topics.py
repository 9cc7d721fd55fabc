"""Stored event topics are pinned: every event type has its own fixed ``TOPIC``, and
the topics are exactly the ones below. A stored topic never changes (old logs must
load); a new event type adds its row here."""

from __future__ import annotations

import importlib

import pytest
from eventsourcing.utils import get_topic, resolve_topic

from contextledger.domain.events import ConversationEvent, DomainEvent, SealedEvent

#: Every topic ever written to a store, with the class that reads it today.
PINNED: dict[str, str] = {
    "contextledger.conversation.Started": "contextledger.domain.events.Started",
    "contextledger.conversation.MessageAppended": "contextledger.domain.events.MessageAppended",
    "contextledger.conversation.ThresholdReached": "contextledger.domain.events.ThresholdReached",
    "contextledger.conversation.SummaryCreated": "contextledger.domain.events.SummaryCreated",
    "contextledger.conversation.SummarizationFailed": "contextledger.domain.events.SummarizationFailed",
    "contextledger.conversation.PolicyChanged": "contextledger.domain.events.PolicyChanged",
    "contextledger.conversation.UsageRecorded": "contextledger.domain.events.UsageRecorded",
    "contextledger.conversation.ToolsChanged": "contextledger.domain.events.ToolsChanged",
    "contextledger.conversation.MessagesRetracted": "contextledger.domain.events.MessagesRetracted",
    "contextledger.conversation.MessageEdited": "contextledger.domain.events.MessageEdited",
    "contextledger.conversation.SystemPromptChanged": "contextledger.domain.events.SystemPromptChanged",
    "contextledger.conversation.SummaryInvalidated": "contextledger.domain.events.SummaryInvalidated",
    "contextledger.conversation.NativeSummaryReadable": "contextledger.domain.events.NativeSummaryReadable",
    "contextledger.conversation.Forked": "contextledger.domain.events.Forked",
    "contextledger.client_message_id.Recorded": "contextledger.domain.client_ids.ClientMessageId.Recorded",
    "contextledger.placement.Recorded": "contextledger.domain.placement.Placement.Recorded",
    "contextledger.erasure.ContentErased": "contextledger.domain.erasure.ContentErased",
    "contextledger.conversation.Snapshot": "contextledger.domain.conversation.ConversationSnapshot",
}

#: Bases that are never stored themselves.
ABSTRACT = {DomainEvent, ConversationEvent, SealedEvent}

MODULES = [
    "contextledger.domain.events",
    "contextledger.domain.client_ids",
    "contextledger.domain.placement",
    "contextledger.domain.conversation",
    "contextledger.domain.erasure",
    "contextledger.domain",
]


def stored_event_types() -> list[type[DomainEvent]]:
    """Every event class the package defines (the domain's modules imported first)."""
    for module in MODULES:
        importlib.import_module(module)
    found: list[type[DomainEvent]] = []
    todo = list(DomainEvent.__subclasses__())
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if cls.__module__.startswith("contextledger.") and cls not in ABSTRACT:
            found.append(cls)
    return sorted(set(found), key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_stored_event_type_pins_its_own_topic() -> None:
    unpinned = [
        f"{c.__module__}.{c.__qualname__}" for c in stored_event_types() if not c.__dict__.get("TOPIC")
    ]
    assert unpinned == [], "give each event class its own TOPIC (and add it to PINNED)"


def test_the_topics_are_exactly_the_pinned_table() -> None:
    actual = {cls.TOPIC: f"{cls.__module__}.{cls.__qualname__}" for cls in stored_event_types()}
    assert actual == PINNED


@pytest.mark.parametrize("topic", sorted(PINNED))
def test_each_pinned_topic_resolves_to_its_class_and_is_the_one_written(topic: str) -> None:
    cls = resolve_topic(topic)
    assert isinstance(cls, type) and issubclass(cls, DomainEvent)
    assert topic == cls.TOPIC and get_topic(cls) == topic


def test_the_abstract_bases_are_the_known_three() -> None:
    assert sorted(c.__name__ for c in ABSTRACT) == ["ConversationEvent", "DomainEvent", "SealedEvent"]
    assert all(not c.__dict__.get("TOPIC") for c in ABSTRACT)
