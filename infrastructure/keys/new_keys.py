"""A subject's first data key, written in the transaction of its first record.

Made on its own, a new key costs a transaction of its own before the record it
encrypts (and a check of the master key, and a read of the key's row): on SQLite a
second commit, about as dear as the append itself. A recorder that can write the
key's row in the record's own transaction (``SQLiteConversationRecorder``) maps a
save's events ``deferring()``: a subject without a key row then gets a **new** key
held here (``NewKeys``), not in the table; the records are encrypted under it, and
the recorder inserts its row, then the records, in one transaction:

- the key's row is ``INSERT ... ON CONFLICT (subject) DO NOTHING``, and only while the
  table's check row names this process's master key (the check ``check_master``
  makes, in the same statement: the master key was checked in full once before);
- the records are fenced as every record is (``key_fence``): they are stored only if
  every key they name holds its wrapped key in the table.

So if another process made the subject's key first, or erased the subject, or the
master key was rotated, the row is not inserted, the fence refuses the records, and
nothing of the save is stored: the recorder drops the new key (``lose``) and maps the
events again, now with the table's key (or ``ConversationErasedError`` for the
tombstone, ``ConfigurationError`` for a master key that is no longer current). Once
committed, the key is cached as a key read from the table is (``settle``).

Anything else that asks for the subject's key meanwhile (not deferring) gets it
stored first, in a transaction of its own: a key never encrypts a record or a value
that could be stored without its row.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from contextledger.infrastructure.keys.aead import AESGCMCipher
from contextledger.infrastructure.keys.key_tables import KeyRow
from contextledger.infrastructure.keys.wrapping import (
    CHECK_SUBJECT,
    KEY_ID_SIZE,
    MASTER_KEY_SIZE,
    DataKey,
    wrap_key,
)

__all__ = ["NewKey", "NewKeyLost", "NewKeys", "deferring", "is_deferring", "made"]

#: Conversations remembered as naming a subject (``NewKeys.look_up``) at most.
_LOOK_UP_LIMIT = 65536
_DEFERRING: ContextVar[bool] = ContextVar("contextledger_defer_new_keys", default=False)


class _Deferring:
    """``deferring()``'s context manager: a class, not a generator (every save enters one)."""

    __slots__ = ("_token",)

    def __enter__(self) -> None:
        self._token = _DEFERRING.set(True)

    def __exit__(self, *exc: object) -> None:
        _DEFERRING.reset(self._token)


def deferring() -> _Deferring:
    """Within: a subject's new key is held (``NewKeys``), its row written by the
    recorder with the records (see the module doc)."""
    return _Deferring()


def is_deferring() -> bool:
    return _DEFERRING.get()


@dataclass
class NewKey:
    """A data key made but not stored yet: the key, its row, and the conversations
    whose records were encrypted under it (cached as theirs once it is stored)."""

    key: DataKey
    row: KeyRow
    conversations: set[UUID] = field(default_factory=set)
    #: A new conversation taken to be its own subject without reading the table: the
    #: row is inserted only if the conversation names no subject.
    unassigned: UUID | None = None


class NewKeys:
    """The new keys of one store's ``SubjectKeys``, by subject and by key id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_subject: dict[str, NewKey] = {}
        self._by_id: dict[bytes, NewKey] = {}
        #: Whether the master key was checked in full (``SubjectKeys.check_master``)
        #: since the last key lost: a new key's row then checks it in SQL alone.
        self.master_checked = False
        #: The statement inserting a new key's row (the key table's ``new_key_insert``);
        #: None: keys are never written with records.
        self.insert: Callable[[KeyRow, str, str, UUID | None], tuple[str, tuple[Any, ...]]] | None = None
        #: New conversations whose subject is read from the table (named in this
        #: process, or a first record refused): never taken to be their own subject.
        self.look_up: set[UUID] = set()
        self._lost: set[bytes] = set()

    def of_subject(self, subject: str) -> NewKey | None:
        return self._by_subject.get(subject)

    def of_id(self, key_id: bytes) -> NewKey | None:
        return self._by_id.get(key_id)

    def make(self, check_master: Callable[[], None], new: NewKey) -> DataKey:
        """Hold ``new`` (``add``), the master key checked in full (``check_master``)
        before the first key held since the last one lost; its key."""
        if not self.master_checked:  # then each new row's insert checks it
            check_master()
            self.master_checked = True
        return self.add(new).key

    def add(self, new: NewKey) -> NewKey:
        """Hold ``new`` unless its subject has one held already: the one held."""
        with self._lock:
            held = self._by_subject.setdefault(new.key.subject, new)
            self._by_id[held.key.key_id] = held
            return held

    def take(self, key_ids: Sequence[bytes]) -> list[NewKey]:
        """Stop holding the keys of ``key_ids`` (stored, or lost): those that were held."""
        taken = []
        with self._lock:
            for key_id in key_ids:
                new = self._by_id.pop(key_id, None)
                if new is not None:
                    taken.append(new)
                    if self._by_subject.get(new.key.subject) is new:
                        del self._by_subject[new.key.subject]
        return taken

    def held(self, key_ids: Sequence[bytes]) -> list[NewKey]:
        """The new keys held among ``key_ids``, each once, in order."""
        by_id = self._by_id
        if not by_id:
            return []
        return [new for key_id in dict.fromkeys(key_ids) if (new := by_id.get(key_id)) is not None]

    def inserts(self, key_ids: Sequence[bytes], master_id: str) -> list[tuple[bytes, str, tuple[Any, ...]]]:
        """For each new key among ``key_ids``: its id, and the statement and parameters
        that insert its row (checking the master key ``master_id``)."""
        found = self.held(key_ids)
        insert = self.insert
        if not found or insert is None:
            return []
        return [(n.key.key_id, *insert(n.row, CHECK_SUBJECT, master_id, n.unassigned)) for n in found]

    def lose(self, key_ids: Sequence[bytes]) -> None:
        """The new keys of ``key_ids`` were not stored (the table holds another key of
        their subject, its tombstone, another master key, or the conversation names a
        subject): dropped; the next new key checks the master key in full again, and
        their conversations' subjects are read from the table."""
        for new in self.take(key_ids):
            if new.unassigned is not None:
                self.note_named(new.unassigned)
        with self._lock:
            if len(self._lost) > _LOOK_UP_LIMIT:
                self._lost.clear()
            self._lost.update(key_ids)
        self.master_checked = False

    def lost(self, key_ids: Sequence[bytes]) -> bool:
        """Whether one of ``key_ids`` is a new key that was not stored: a record another
        thread encrypted under it meanwhile is mapped again too."""
        return any(key_id in self._lost for key_id in key_ids)

    def note_named(self, conversation_id: UUID) -> None:
        """The conversation names a subject (or may): read it from the table."""
        with self._lock:
            if len(self.look_up) > _LOOK_UP_LIMIT:
                self.look_up.clear()
            self.look_up.add(conversation_id)

    def drop_subject(self, subject: str) -> None:
        """Stop holding the subject's new key (it is being erased)."""
        with self._lock:
            new = self._by_subject.pop(subject, None)
            if new is not None:
                self._by_id.pop(new.key.key_id, None)


class NewKeyLost(Exception):
    """A subject's new key was not stored with the save's records (another key or a
    tombstone of its subject was there first, or the master key changed): nothing of
    the save was stored, and its events are mapped again."""

    def __init__(self, key_ids: list[bytes]) -> None:
        super().__init__("a new data key was not stored")
        self.key_ids = key_ids


def made(
    master: AESGCMCipher | None, master_id: str, subject: str, at: datetime, unassigned: UUID | None = None
) -> NewKey:
    """A new random data key for ``subject`` and its row, the key wrapped under
    ``master`` (as it is when None), not stored."""
    key, key_id = os.urandom(MASTER_KEY_SIZE), os.urandom(KEY_ID_SIZE)
    row = KeyRow(key_id, subject, wrap_key(master, key, key_id, subject), master_id, at)
    return NewKey(DataKey(key_id, subject, AESGCMCipher.from_key(key)), row, unassigned=unassigned)
