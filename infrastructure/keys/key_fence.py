"""The write fence: no record is stored under the key of an erased data subject.

Every record of a subject's conversation names its data key(s) in its clear header
(``subject_mapper``). A process caches keys (``subject_keys``), so the key it
encrypts a record under may have been destroyed by another process since. The fence
closes that gap where it can be closed, in the write's own transaction: a record that
names data keys is stored only if every one of them still holds a wrapped key in the
key table, checked by the statement that inserts it:

- PostgreSQL: the insert takes a shared row lock (``FOR KEY SHARE``) on the key rows
  it names and inserts nothing unless all of them are live; erasure takes the row
  exclusively (``FOR UPDATE``) before it destroys the key. Either the write commits
  first (the erasure then waits for it, and the record is erased with the rest) or
  the erasure commits first (the write then sees the tombstone and stores nothing).
  The lock is the weakest that conflicts with ``FOR UPDATE``: a master-key rotation,
  which re-wraps key rows in one long transaction, does not hold writes up.
- SQLite: one writer at a time; the check runs inside the insert, under the write lock.
- memory: the check and the insert run under the recorder's lock.

A refused write raises ``ConversationErasedError`` (the key table's tombstone says
when and why; the process's key cache learns it). So no write to a subject is
acknowledged once its erasure has committed, and every record of an erased subject
stands in the log before the erasure's ``ContentErased``: read models, which apply
the log in order, delete the subject's rows after the last of them.

A subject's first key may ride with its first records (``new_keys``): a recorder
given ``new_keys`` inserts the rows of the new keys its records name in their own
transaction, before them, and the fence then checks those rows as any other.

``KeyFence`` is what a recorder is given (by ``SubjectKeysFactory``): the key table's
name, how to find a record's key ids, and the error of a refused write. With the key
table in a PostgreSQL database of its own (``key_store``), one statement cannot read
it: ``hold`` then locks the key rows there (``FOR KEY SHARE``) in a transaction held
across the write (``held``), and the recorder inserts without the fence's condition.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Protocol, TypeVar
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from contextledger.infrastructure.keys.key_tables import KeyRow
from contextledger.infrastructure.keys.new_keys import NewKeys

__all__ = ["FreshKeys", "KeyFence"]


class FreshKeys(Protocol):
    """The data keys whose new keys a recorder writes with their first records
    (``SubjectKeys``): the new keys held, and ``settle`` once they are stored."""

    master_id: str
    new_keys: NewKeys

    def settle(self, key_ids: Sequence[bytes]) -> None: ...


T = TypeVar("T")


@dataclass(frozen=True)
class KeyFence:
    """What a recorder needs to fence its writes (see the module doc).

    ``table``: the key table as SQL names it (schema-qualified and quoted where the
    store needs it); ``key_ids``: the data key ids a stored record names (None: it
    names none: a record under the master key, or in clear); ``refused``: the error
    of a write refused, given the conversation and the key ids it named; ``live``:
    whether the key table holds the key unerased (the in-memory store's check);
    ``hold``: the key rows held in the key database across a write (None: the key
    table is in the event store, checked by the insert itself); ``fresh``: the keys
    whose new keys a recorder may store with their first records (None: every key is
    stored before its records); ``subjects``: the conversations' subjects table."""

    table: str
    key_ids: Callable[[bytes], list[bytes] | None]
    refused: Callable[[UUID, Sequence[bytes]], Exception]
    live: Callable[[bytes], bool]
    hold: Callable[[Sequence[bytes]], AbstractContextManager[bool]] | None = None
    fresh: FreshKeys | None = None
    #: The table of conversations that name a subject, as SQL names it ("": none).
    subjects: str = ""
    #: Hands a key row read with the records to the key cache (``persistence.pgkeyrows``).
    learn: Callable[[KeyRow], None] | None = None

    def held(self, stored_events: Sequence[StoredEvent], write: Callable[[], T]) -> T:
        """``write()`` run while the keys the records name are held (``hold``); the
        error of a refused write, nothing written, if one of them is erased."""
        named = self.named(stored_events)
        if not named or self.hold is None:
            return write()
        with self.hold(named) as live:
            if not live:
                raise self.error(stored_events)
            return write()

    def named(self, stored_events: Sequence[StoredEvent]) -> list[bytes]:
        """Every data key id the records name, each once, in order."""
        found: dict[bytes, None] = {}
        for event in stored_events:
            for key_id in self.key_ids(bytes(event.state)) or ():
                found[key_id] = None
        return list(found)

    def error(self, stored_events: Sequence[StoredEvent]) -> Exception:
        """The error of a refused write of ``stored_events``: the first record's
        conversation, every key the records name (the tombstoned one among them)."""
        first = stored_events[0].originator_id
        conversation = first if isinstance(first, UUID) else UUID(str(first))
        return self.refused(conversation, self.named(stored_events))
