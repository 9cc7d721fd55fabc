"""How the ledger writes conversations to its event store, and folds them back.

``ConversationApplication`` is eventsourcing's ``Application`` with a leaner save for
``Conversation`` aggregates: the conversation store saves through
``save_conversations`` on every command, which writes the events as ``save`` writes
them without building what only eventsourcing's hooks use. A recorder with a
``map_and_insert`` maps the events itself (the SQLite store's: a subject's first
data key is then written in the transaction of its first records). Its repository
folds an aggregate's events with ``project_events``, without the library's check of
each event against a runtime protocol.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.application import Application, ProcessingEvent, Repository
from eventsourcing.persistence import Recording
from eventsourcing.utils import EnvType

from contextledger.domain.conversation import Conversation, project_events

__all__ = ["ConversationApplication", "FoldingRepository"]


class FoldingRepository(Repository[UUID]):
    """eventsourcing's ``Repository``, folding the events it reads with
    ``project_events`` unless a caller names another projector: the library's default
    checks every event with an ``isinstance`` of a runtime-checkable ``Protocol``
    (about 13 µs an event), most of the fold of a conversation loaded cold or re-derived
    at a version."""

    def get(self, aggregate_id: UUID, *, projector_func: Any = project_events, **kwargs: Any) -> Any:
        return super().get(aggregate_id, projector_func=projector_func, **kwargs)


class ConversationApplication(Application[UUID]):
    """An eventsourcing application whose aggregates are mostly conversations."""

    def __init__(self, env: EnvType | None = None) -> None:
        super().__init__(env=env)
        cls = type(self)
        #: Whether ``save_conversations`` may skip what ``save`` builds for hooks.
        self._lean_save = (
            cls._notify is Application._notify
            and cls.notify is Application.notify
            and not self.repository.cache
            and not self.snapshotting_intervals
        )

    def construct_repository(self) -> Repository[UUID]:
        """The library's repository, as configured from the environment (cache,
        fast-forward, copies), reading through ``FoldingRepository.get``."""
        repository = super().construct_repository()
        repository.__class__ = FoldingRepository  # the same object: only ``get`` differs
        return repository

    def save(self, *objs: Any, **kwargs: Any) -> list[Recording[UUID]]:
        """eventsourcing's ``Application.save``; conversations alone skip its generic
        collection, which checks each object against two runtime protocols. The
        ledger's own saves go through ``save_conversations``."""
        if kwargs or not all(isinstance(obj, Conversation) for obj in objs):
            recorded: list[Recording[UUID]] = super().save(*objs, **kwargs)
            return recorded
        processing: ProcessingEvent[UUID] = ProcessingEvent()
        for conversation in objs:
            processing.events.extend(conversation.collect_events())
            processing.aggregates[conversation.id] = conversation
        recordings = self._record(processing)
        self._take_snapshots(processing)
        self._notify(recordings)
        self.notify(processing.events)  # eventsourcing's deprecated hook, kept
        return recordings

    def save_conversations(self, *objs: Any) -> list[Any]:
        """``save`` for the conversation store (every append); returns the events it
        saved. They are written as ``save`` writes them; the recordings ``save``
        returns (a notification object per event) are not built, unless a subclass
        hooks eventsourcing's ``_notify``/``notify``, an aggregate cache or
        snapshotting intervals need them (then this is ``save``)."""
        if not self._lean_save or not all(isinstance(obj, Conversation) for obj in objs):
            events = [event for obj in objs for event in getattr(obj, "_pending_events", ())]
            self.save(*objs)
            return events
        events = []
        for conversation in objs:
            events += conversation.collect_events()
        store = self.events
        recorder: Any = store.recorder
        insert = getattr(recorder, "map_and_insert", None)
        if insert is not None:  # a recorder that stores a subject's new key with its records
            insert(store.mapper, events)
        else:
            to_stored = store.mapper.to_stored_event
            recorder.insert_events([to_stored(event) for event in events])
        return events
