"""Conversations spread over several stores (shards), routed by their id.

A deployment of several stores (``Settings.stores``) keeps each conversation whole in
one store: its events, snapshots, client message ids, its place in that store's
notification log, the tracking rows and read models of that store's followers.
Nothing is shared between stores except the directory of placements in the first one.

- A new conversation goes to ``home_store(id, K)``: a stable hash of its id over the K
  stores configured now (keys map to ids, so keys route the same way).
- Where it went is recorded once in the first store (a ``Placement``), before the
  conversation is stored, so it is found there after stores are added: adding a store
  moves nothing, and only new conversations spread over the new set.
- A conversation without a placement is in the first store (it was started before the
  deployment had several stores).
- Placements never change, so each process keeps those it has read.

``ShardedStore`` has the interface of ``ConversationStore`` and passes each call to
the store of the conversation it names; a fork reads its source wherever it lives.
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError, OperationalError, PersistenceError

from contextledger.application.storage.store import (
    ConversationStore,
    FairLock,
    StoreApplication,
    store_errors,
)
from contextledger.domain.conversation import Conversation
from contextledger.domain.placement import Placement
from contextledger.domain.values.errors import StoreError

__all__ = ["ShardedStore", "home_store"]

T = TypeVar("T")

#: Salt of the routing hash, so that a store's conversations spread evenly over the
#: ``--shard I/N`` workers inside it (which split by ``id modulo N``).
_SALT = b"contextledger/store/"


def home_store(conversation_id: UUID, stores: int) -> int:
    """The store (of ``stores``) where a new conversation with this id goes: a hash
    of the id's bytes, the same in every process, platform and Python version."""
    if stores < 1:
        raise ValueError("stores must be at least 1")
    digest = hashlib.blake2b(_SALT + conversation_id.bytes, digest_size=8).digest()
    return int.from_bytes(digest, "big") % stores


class _RoutedEvents:
    """``app.events.get`` routed to the conversation's store."""

    def __init__(self, router: ShardedStore) -> None:
        self._router = router

    def get(self, originator_id: UUID, **kwargs: Any) -> Iterator[Any]:
        return self._router.app_for(originator_id).events.get(originator_id, **kwargs)

    def of(self, originator_id: UUID) -> Any:
        """The event store that holds the conversation's records."""
        return self._router.app_for(originator_id).events


class _RoutedRepository:
    """``app.repository.get`` routed to the conversation's store."""

    def __init__(self, router: ShardedStore) -> None:
        self._router = router

    def get(self, aggregate_id: UUID, **kwargs: Any) -> Any:
        return self._router.app_for(aggregate_id).repository.get(aggregate_id, **kwargs)


class _RoutedApp:
    """What readers of ``store.app`` use (events and repository), routed by id."""

    def __init__(self, router: ShardedStore) -> None:
        self.events = _RoutedEvents(router)
        self.repository = _RoutedRepository(router)


class ShardedStore(ConversationStore):
    """The conversation stores of several shards behind one ``ConversationStore``
    interface (see the module doc). It keeps no cache of its own: each store's does."""

    def __init__(
        self, stores: Sequence[ConversationStore], *, clock: Callable[[], datetime] | None = None
    ) -> None:
        if len(stores) < 2:
            raise ValueError("a sharded store needs at least two stores")
        self.stores = list(stores)
        self.snapshot_interval = self.stores[0].snapshot_interval
        self.app = _RoutedApp(self)  # type: ignore[assignment]
        self._clock = clock or (lambda: datetime.now(UTC))
        self._placed: dict[UUID, int] = {}
        self._placed_lock = threading.Lock()

    @property
    def directory(self) -> StoreApplication:
        """The application of the first store, which keeps the placements."""
        return self.stores[0].app

    # -- where a conversation lives --------------------------------------------------

    def placement(self, conversation_id: UUID) -> int | None:
        """The recorded store of the conversation (None: no placement recorded)."""
        with self._placed_lock:
            found = self._placed.get(conversation_id)
        if found is not None:
            return found
        try:
            with store_errors(conversation_id):
                record: Placement = self.directory.repository.get(Placement.id_for(conversation_id))
        except AggregateNotFoundError:
            return None
        if not 0 <= record.store < len(self.stores):
            raise StoreError(
                f"the conversation is placed in store {record.store}, but only "
                f"{len(self.stores)} stores are configured (add the new stores to every process)",
                conversation_id=conversation_id,
            )
        self._remember(conversation_id, record.store)
        return record.store

    def index_of(self, conversation_id: UUID) -> int:
        """The index of the store that holds (or would hold) the conversation."""
        found = self.placement(conversation_id)
        if found is not None:
            return found
        # No placement: started before there were several stores, in the first one.
        if self._in_first_store(conversation_id):
            self._remember(conversation_id, 0)
        return 0

    def store_for(self, conversation_id: UUID) -> ConversationStore:
        return self.stores[self.index_of(conversation_id)]

    def app_for(self, aggregate_id: UUID) -> StoreApplication:
        return self.store_for(aggregate_id).app

    def _landed(self, conversation_id: UUID, pending: list[Any]) -> bool:
        return self.store_for(conversation_id)._landed(conversation_id, pending)

    def _cache_put(self, conversation: Conversation) -> None:
        self.store_for(conversation.id)._cache_put(conversation)

    def _cache_evict(self, conversation_id: UUID) -> None:
        self.store_for(conversation_id)._cache_evict(conversation_id)

    def _in_first_store(self, conversation_id: UUID) -> bool:
        with store_errors(conversation_id):
            return bool(list(self.stores[0].app.events.get(conversation_id, lte=1)))

    def _remember(self, conversation_id: UUID, index: int) -> None:
        with self._placed_lock:
            if len(self._placed) > 1_000_000:
                self._placed.clear()
            self._placed[conversation_id] = index

    def _place(self, conversation_id: UUID) -> int:
        """Record where a new conversation goes (or find where it went already)."""
        found = self.placement(conversation_id)
        if found is not None:
            return found
        if self._in_first_store(conversation_id):
            raise IntegrityError(f"conversation {conversation_id} exists in the first store")
        index = home_store(conversation_id, len(self.stores))
        record = Placement.record(conversation_id, index, at=self._clock())
        try:
            self.directory.save(record)
        except IntegrityError:
            # Another process placed it first: go where it went.
            found = self.placement(conversation_id)
            if found is None:
                raise
            return found
        except (OperationalError, PersistenceError) as exc:
            raise StoreError(
                f"the directory of placements failed: {exc}", conversation_id=conversation_id
            ) from exc
        self._remember(conversation_id, index)
        return index

    def place_new(self, conversation_id: UUID) -> ConversationStore:
        """The store a new conversation goes to, its placement recorded now (what is
        kept per store beside the conversation, such as its data subject, is written
        there before it is created)."""
        return self.stores[self._place(conversation_id)]

    # -- the ConversationStore interface ------------------------------------------------

    def create(self, conversation: Conversation) -> None:
        self.stores[self._place(conversation.id)].create(conversation)

    def execute(self, conversation_id: UUID, command: Any, *, on_conflict: Any = None) -> Any:
        return self.store_for(conversation_id).execute(conversation_id, command, on_conflict=on_conflict)

    def save(self, conversation: Conversation, *others: Any) -> None:
        self.store_for(conversation.id).save(conversation, *others)

    def load(self, conversation_id: UUID, *, fresh: bool = True) -> Conversation:
        return self.store_for(conversation_id).load(conversation_id, fresh=fresh)

    def read(self, conversation_id: UUID, reader: Callable[[Conversation], T]) -> T:
        return self.store_for(conversation_id).read(conversation_id, reader)

    def copy(self, conversation_id: UUID) -> Conversation:
        return self.store_for(conversation_id).copy(conversation_id)

    def at_version(self, conversation_id: UUID, version: int) -> Conversation:
        return self.store_for(conversation_id).at_version(conversation_id, version)

    def events(self, conversation_id: UUID) -> list[Any]:
        return self.store_for(conversation_id).events(conversation_id)

    def records(self, conversation_id: UUID) -> list[Any]:
        return self.store_for(conversation_id).records(conversation_id)

    def client_position(self, conversation_id: UUID, client_message_id: str) -> int | None:
        return self.store_for(conversation_id).client_position(conversation_id, client_message_id)

    def lock(self, conversation_id: UUID) -> FairLock:
        return self.store_for(conversation_id).lock(conversation_id)
