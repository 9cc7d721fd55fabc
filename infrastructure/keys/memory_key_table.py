"""The key table of an in-memory store (``memory://``): the ``KeyTable`` protocol of
``key_tables`` over dictionaries, under one lock."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

from contextledger.infrastructure.keys.key_tables import KeyRow

__all__ = ["MemoryKeyTable"]


class MemoryKeyTable:
    """The key table of an in-memory store."""

    where = "memory://"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rows: dict[str, KeyRow] = {}
        self._ids: dict[bytes, str] = {}
        self._subjects: dict[UUID, str] = {}

    def create_tables(self) -> None:
        return None

    def insert(self, row: KeyRow) -> KeyRow:
        with self._lock:
            stored = self._rows.setdefault(row.subject, row)
            self._ids[stored.key_id] = stored.subject
            return stored

    def by_subject(self, subject: str) -> KeyRow | None:
        return self._rows.get(subject)

    def by_id(self, key_id: bytes) -> KeyRow | None:
        with self._lock:
            subject = self._ids.get(key_id)
            return None if subject is None else self._rows.get(subject)

    def tombstone(self, row: KeyRow) -> KeyRow:
        with self._lock:
            old = self._rows.get(row.subject)
            if old is None:
                new = replace(row, wrapped_key=None, master_id="")
            elif old.erased:
                new = old
            else:
                new = replace(
                    old,
                    wrapped_key=None,
                    master_id="",
                    erased_at=row.erased_at,
                    erase_reason=row.erase_reason,
                )
            self._rows[row.subject] = new
            self._ids[new.key_id] = new.subject
            return new

    def wrapped(self) -> list[KeyRow]:
        with self._lock:
            return [r for r in self._rows.values() if r.wrapped_key is not None]

    def replace_wrapped(self, rows: Sequence[tuple[KeyRow, bytes, str]]) -> int:
        with self._lock:
            done = 0
            for row, wrapped, master_id in rows:
                now = self._rows.get(row.subject)
                if now is not None and now.master_id == row.master_id and now.wrapped_key is not None:
                    self._rows[row.subject] = replace(now, wrapped_key=wrapped, master_id=master_id)
                    done += 1
            return done

    def subject_of(self, conversation_id: UUID) -> str | None:
        return self._subjects.get(conversation_id)

    def conversations_of(self, subject: str) -> list[UUID]:
        return sorted(c for c, s in list(self._subjects.items()) if s == subject)

    def assign(self, conversation_id: UUID, subject: str) -> str:
        with self._lock:
            return self._subjects.setdefault(conversation_id, subject)
