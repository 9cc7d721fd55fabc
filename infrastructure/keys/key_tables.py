"""Where the data keys of data subjects are kept: two tables beside the event tables.

In the same store as the events (created with them, in the store's schema when one
is set), named as the store names its own tables:

- ``<prefix>_subject_keys`` -- one row per data subject::

      key_id       16 random bytes, primary key: named in the clear header of every
                   record encrypted under the key (so reading never needs a subject)
      subject      the data subject (unique): a person's or tenant's id as the
                   application names it, or a conversation's id for a conversation
                   that is its own subject
      wrapped_key  the 32-byte data key, AES-GCM encrypted under the master key
                   (``nonce | tag | ciphertext``, the key id and subject as associated
                   data); NULL once the subject is erased (the tombstone)
      master_id    which master key wrapped it (a keyed digest of the master key, never
                   the key): rotation re-wraps row by row and can resume
      created_at   when the key was made
      erased_at    the tombstone: when the subject was erased, and why
      erase_reason

- ``<prefix>_conversation_subjects`` -- ``conversation_id -> subject`` for conversations
  that name a subject; a conversation without a row is its own subject.

The prefix is ``stored`` in SQLite (``stored_events``' neighbours) and the
application's name in PostgreSQL (``contextledger_subject_keys`` beside
``contextledger_events``). Rows are only ever added, and a key's row changes twice at
most: re-wrapped under a new master key, and turned into a tombstone. Adding a row
is ``INSERT ... ON CONFLICT DO NOTHING`` followed by a read of the row: two processes
creating one subject's key at once both end up with the row that won.

``memory_key_table.MemoryKeyTable`` is the same for ``memory://``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

import psycopg
from eventsourcing.persistence import PersistenceError

from contextledger.application.storage.store_failures import failure_cause, store_error
from contextledger.domain.values.errors import StoreError

__all__ = [
    "KeyRow",
    "KeyTable",
    "PostgresKeyTable",
    "SQLiteKeyTable",
    "key_row",
]


@dataclass(frozen=True)
class KeyRow:
    """One row of the key table."""

    key_id: bytes
    subject: str
    #: None: erased (a tombstone).
    wrapped_key: bytes | None
    master_id: str
    created_at: datetime
    erased_at: datetime | None = None
    erase_reason: str | None = None

    @property
    def erased(self) -> bool:
        return self.erased_at is not None


class KeyTable(Protocol):
    """The key table of one store (see the module doc)."""

    where: str  #: the store, as a URL without its password (for messages)

    def create_tables(self) -> None: ...

    def insert(self, row: KeyRow) -> KeyRow:
        """Add ``row`` unless its subject has one already; the subject's row as stored."""
        ...

    def by_subject(self, subject: str) -> KeyRow | None: ...

    def by_id(self, key_id: bytes) -> KeyRow | None: ...

    def tombstone(self, row: KeyRow) -> KeyRow:
        """Destroy the subject's wrapped key, recording ``row``'s erasure time and reason
        (a subject erased already keeps its first ones; one never seen gets ``row``)."""
        ...

    def wrapped(self) -> list[KeyRow]:
        """Every row that still holds a wrapped key."""
        ...

    def replace_wrapped(self, rows: Sequence[tuple[KeyRow, bytes, str]]) -> int:
        """For each ``(row, wrapped, master_id)``: store the key re-wrapped, if the row is
        still as read (``row.master_id``, not erased since). One transaction; the count."""
        ...

    def subject_of(self, conversation_id: UUID) -> str | None: ...

    def conversations_of(self, subject: str) -> list[UUID]:
        """The conversations that name ``subject`` (not one that is its own subject)."""
        ...

    def assign(self, conversation_id: UUID, subject: str) -> str:
        """Name ``subject`` for the conversation unless it has one; the one it has."""
        ...


# -- SQL -------------------------------------------------------------------------------


def key_row(values: Sequence[Any]) -> KeyRow:
    """A key row from its seven columns in the table's order, its times as the store
    gives them (``datetime``; ISO text on SQLite)."""
    key_id, subject, wrapped, master_id, created, erased, reason = values
    return KeyRow(
        key_id=bytes(key_id),
        subject=subject,
        wrapped_key=None if wrapped is None else bytes(wrapped),
        master_id=master_id,
        created_at=_as_time(created) or datetime.min,
        erased_at=_as_time(erased),
        erase_reason=reason,
    )


def _as_time(value: Any) -> datetime | None:
    return value if value is None or isinstance(value, datetime) else datetime.fromisoformat(value)


#: Failures of the database's server, not of the key table: reported as the event
#: store's (the key table lives in its database).
_UNREACHABLE = ("connect_timeout", "server_unreachable", "connection_lost")

_COLUMNS = "key_id, subject, wrapped_key, master_id, created_at, erased_at, erase_reason"


class _SQLKeyTable:
    """The statements of both SQL stores, written with ``?`` placeholders."""

    where, _EXISTS = "", ""

    def __init__(self, keys: str, subjects: str) -> None:
        self.keys = keys
        self.subjects = subjects

    # Each store supplies these.
    @contextmanager
    def _cursor(self, *, commit: bool) -> Iterator[Any]:
        raise NotImplementedError
        yield

    def _sql(self, text: str) -> Any:
        return text

    def _creating(self, cursor: Any) -> None:
        """Before the tables are made (PostgreSQL: one creating process at a time)."""

    def _create_statements(self) -> list[str]:
        raise NotImplementedError

    def _missing_table(self, exc: BaseException) -> bool:
        raise NotImplementedError

    def _from_time(self, value: datetime | None) -> Any:
        return value

    # The rest is shared.

    def _run(self, work: Callable[[Any], Any], *, commit: bool, reading: bool = False) -> Any:
        try:
            with self._cursor(commit=commit) as cursor:
                return work(cursor)
        except (PersistenceError, sqlite3.Error, psycopg.Error) as exc:
            if reading and self._missing_table(exc):
                return None  # a store made before key tables existed: no key in it
            if failure_cause(exc) in _UNREACHABLE:  # the server, not the table: say so
                raise store_error(exc) from exc
            raise StoreError(f"the key table cannot be used: {exc}", cause="key_table") from exc

    def _row(self, values: Any) -> KeyRow | None:
        if values is None:
            return None
        return key_row(list(values.values()) if isinstance(values, dict) else list(values))

    def _params(self, row: KeyRow) -> tuple[Any, ...]:
        return (
            row.key_id,
            row.subject,
            row.wrapped_key,
            row.master_id,
            self._from_time(row.created_at),
            self._from_time(row.erased_at),
            row.erase_reason,
        )

    def create_tables(self) -> None:
        def work(cursor: Any) -> None:
            self._creating(cursor)
            for statement in self._create_statements():
                cursor.execute(self._sql(statement))

        self._run(work, commit=True)

    def _select(self, cursor: Any, where: str, value: Any) -> KeyRow | None:
        cursor.execute(self._sql(f"SELECT {_COLUMNS} FROM {self.keys} WHERE {where} = ?"), (value,))
        return self._row(cursor.fetchone())

    def insert(self, row: KeyRow) -> KeyRow:
        def work(cursor: Any) -> KeyRow | None:
            cursor.execute(
                self._sql(
                    f"INSERT INTO {self.keys} ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (subject) DO NOTHING"
                ),
                self._params(row),
            )
            return self._select(cursor, "subject", row.subject)

        stored: KeyRow | None = self._run(work, commit=True)
        assert stored is not None
        return stored

    def by_subject(self, subject: str) -> KeyRow | None:
        found: KeyRow | None = self._run(
            lambda c: self._select(c, "subject", subject), commit=False, reading=True
        )
        return found

    def exists(self) -> bool:
        """Whether the store has a key table: it was opened with a cipher key."""

        def work(cursor: Any) -> bool:
            cursor.execute(self._sql(self._EXISTS), (self.keys,))
            return cursor.fetchone() is not None

        return bool(self._run(work, commit=False, reading=True))

    def by_id(self, key_id: bytes) -> KeyRow | None:
        found: KeyRow | None = self._run(
            lambda c: self._select(c, "key_id", key_id), commit=False, reading=True
        )
        return found

    def _before_tombstone(self, cursor: Any, subject: str) -> None:
        """Anything the store does before it destroys a key (SQLite: secure delete;
        PostgreSQL: lock the row, see ``key_fence``)."""

    def tombstone(self, row: KeyRow) -> KeyRow:
        def work(cursor: Any) -> KeyRow | None:
            self._before_tombstone(cursor, row.subject)
            cursor.execute(
                self._sql(
                    f"INSERT INTO {self.keys} ({_COLUMNS}) VALUES (?, ?, NULL, ?, ?, ?, ?) "
                    "ON CONFLICT (subject) DO UPDATE SET wrapped_key = NULL, master_id = '', "
                    f"erased_at = COALESCE({self.keys}.erased_at, excluded.erased_at), "
                    f"erase_reason = CASE WHEN {self.keys}.erased_at IS NULL THEN excluded.erase_reason "
                    f"ELSE {self.keys}.erase_reason END"
                ),
                (
                    row.key_id,
                    row.subject,
                    "",
                    self._from_time(row.created_at),
                    self._from_time(row.erased_at),
                    row.erase_reason,
                ),
            )
            return self._select(cursor, "subject", row.subject)

        stored: KeyRow | None = self._run(work, commit=True)
        assert stored is not None
        self._after_tombstone()
        return stored

    def _after_tombstone(self) -> None:
        """Anything the store does once a key is destroyed (SQLite: truncate the WAL)."""

    def wrapped(self) -> list[KeyRow]:
        def work(cursor: Any) -> list[KeyRow]:
            cursor.execute(self._sql(f"SELECT {_COLUMNS} FROM {self.keys} WHERE wrapped_key IS NOT NULL"))
            return [r for r in map(self._row, cursor.fetchall()) if r is not None]

        rows: list[KeyRow] | None = self._run(work, commit=False, reading=True)
        return rows or []

    def replace_wrapped(self, rows: Sequence[tuple[KeyRow, bytes, str]]) -> int:
        def work(cursor: Any) -> int:
            done = 0
            for row, wrapped, master_id in rows:
                cursor.execute(
                    self._sql(
                        f"UPDATE {self.keys} SET wrapped_key = ?, master_id = ? "
                        "WHERE key_id = ? AND master_id = ? AND wrapped_key IS NOT NULL"
                    ),
                    (wrapped, master_id, row.key_id, row.master_id),
                )
                done += max(0, getattr(cursor, "sqlite_cursor", cursor).rowcount)
            return done

        count: int = self._run(work, commit=True)
        return count

    def subject_of(self, conversation_id: UUID) -> str | None:
        def work(cursor: Any) -> str | None:
            cursor.execute(
                self._sql(f"SELECT subject FROM {self.subjects} WHERE conversation_id = ?"),
                (self._conversation(conversation_id),),
            )
            found = cursor.fetchone()
            if found is None:
                return None
            return str(found["subject"] if isinstance(found, dict) else found[0])

        subject: str | None = self._run(work, commit=False, reading=True)
        return subject

    def _conversation(self, conversation_id: UUID) -> Any:
        return conversation_id

    def conversations_of(self, subject: str) -> list[UUID]:
        def work(cursor: Any) -> list[UUID]:
            cursor.execute(
                self._sql(f"SELECT conversation_id FROM {self.subjects} WHERE subject = ?"), (subject,)
            )
            rows = cursor.fetchall()
            found = [r["conversation_id"] if isinstance(r, dict) else r[0] for r in rows]
            return sorted(v if isinstance(v, UUID) else UUID(str(v)) for v in found)

        conversations: list[UUID] | None = self._run(work, commit=False, reading=True)
        return conversations or []

    def assign(self, conversation_id: UUID, subject: str) -> str:
        def work(cursor: Any) -> str:
            cid = self._conversation(conversation_id)
            cursor.execute(
                self._sql(
                    f"INSERT INTO {self.subjects} (conversation_id, subject) VALUES (?, ?) "
                    "ON CONFLICT (conversation_id) DO NOTHING"
                ),
                (cid, subject),
            )
            cursor.execute(
                self._sql(f"SELECT subject FROM {self.subjects} WHERE conversation_id = ?"), (cid,)
            )
            found = cursor.fetchone()
            return str(found["subject"] if isinstance(found, dict) else found[0])

        stored: str = self._run(work, commit=True)
        return stored


class SQLiteKeyTable(_SQLKeyTable):
    """The key table in a SQLite store (its datastore's connections).

    A tombstone is written with ``secure_delete`` on (SQLite overwrites the freed bytes
    of the wrapped key) and the write-ahead log is then checkpointed and truncated, so
    the destroyed key is left neither in the database file nor in its WAL."""

    def __init__(self, datastore: Any, prefix: str = "stored") -> None:
        super().__init__(f"{prefix}_subject_keys", f"{prefix}_conversation_subjects")
        self.datastore = datastore
        self._EXISTS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?"

    @contextmanager
    def _cursor(self, *, commit: bool) -> Iterator[Any]:
        with self.datastore.transaction(commit=commit) as cursor:
            yield cursor

    def _create_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.keys} (key_id BLOB PRIMARY KEY, subject TEXT NOT NULL "
            "UNIQUE, wrapped_key BLOB, master_id TEXT NOT NULL, created_at TEXT NOT NULL, "
            "erased_at TEXT, erase_reason TEXT) WITHOUT ROWID",
            f"CREATE TABLE IF NOT EXISTS {self.subjects} (conversation_id TEXT PRIMARY KEY, "
            "subject TEXT NOT NULL) WITHOUT ROWID",
        ]

    def _missing_table(self, exc: BaseException) -> bool:
        return "no such table" in str(exc)

    def _from_time(self, value: datetime | None) -> Any:
        return None if value is None else value.isoformat()

    def _conversation(self, conversation_id: UUID) -> Any:
        return conversation_id.hex

    def new_key_insert(
        self, row: KeyRow, check: str, master_id: str, unassigned: UUID | None
    ) -> tuple[str, tuple[Any, ...]]:
        """The insert of a subject's new key row in the transaction of its first records
        (``new_keys``), and its parameters: it inserts nothing if the subject has a row
        (its key, or its tombstone), unless the check row (subject ``check``) is under
        ``master_id``, or if ``unassigned`` (a conversation taken to be its own
        subject) names a subject."""
        return (
            f"INSERT INTO {self.keys} (key_id, subject, wrapped_key, master_id, created_at) "
            f"SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM {self.keys} WHERE subject = ? AND "
            f"master_id = ?) AND NOT EXISTS (SELECT 1 FROM {self.subjects} WHERE conversation_id = ?) "
            "ON CONFLICT (subject) DO NOTHING",
            (*self._params(row)[:5], check, master_id, None if unassigned is None else unassigned.hex),
        )

    def _before_tombstone(self, cursor: Any, subject: str) -> None:
        cursor.execute("PRAGMA secure_delete = ON")

    def _after_tombstone(self) -> None:
        try:
            with self.datastore.get_connection(commit=True) as conn:
                cursor = conn.cursor()
                cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                cursor.fetchall()
        except (PersistenceError, sqlite3.Error):
            pass  # a reader holds the WAL: SQLite checkpoints it later, as it always does


def _quoted(name: str) -> str:
    """A PostgreSQL identifier, quoted."""
    return '"' + name.replace('"', '""') + '"'


class PostgresKeyTable(_SQLKeyTable):
    """The key table in a PostgreSQL store (its datastore's pool, in its schema).

    PostgreSQL keeps an updated row's old version until ``VACUUM`` reclaims it: run
    ``VACUUM <prefix>_subject_keys`` after an erasure so that the destroyed wrapped key
    leaves the table's pages as well (backups and WAL archives keep it as long as
    they are kept; it opens nothing without the master key)."""

    def __init__(self, datastore: Any, prefix: str) -> None:
        self.datastore = datastore
        self._EXISTS = "SELECT 1 WHERE to_regclass(?) IS NOT NULL"
        schema = _quoted(datastore.schema or "public")
        super().__init__(
            f"{schema}.{_quoted(prefix + '_subject_keys')}",
            f"{schema}.{_quoted(prefix + '_conversation_subjects')}",
        )
        self.table_name = f"{prefix}_subject_keys"

    @contextmanager
    def _cursor(self, *, commit: bool) -> Iterator[Any]:
        if commit:
            with self.datastore.transaction(commit=True) as cursor:
                yield cursor
            return
        # Every read is one statement: in autocommit, one round trip, not three (no BEGIN
        # and ROLLBACK; psycopg also drops a connection's prepared statements on ROLLBACK).
        with self.datastore.get_connection() as conn, conn.cursor() as cursor:
            yield cursor

    def _sql(self, text: str) -> Any:
        return text.replace("?", "%s")

    def _creating(self, cursor: Any) -> None:
        # Processes opening a new store at once: CREATE TABLE IF NOT EXISTS is not safe
        # against itself in PostgreSQL (a duplicate pg_type row), so one at a time.
        cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (self.keys,))

    def _create_statements(self) -> list[str]:
        return [
            f"CREATE TABLE IF NOT EXISTS {self.keys} (key_id bytea PRIMARY KEY, subject text NOT NULL "
            "UNIQUE, wrapped_key bytea, master_id text NOT NULL, created_at timestamptz NOT NULL, "
            "erased_at timestamptz, erase_reason text)",
            f"CREATE TABLE IF NOT EXISTS {self.subjects} (conversation_id uuid PRIMARY KEY, "
            "subject text NOT NULL)",
        ]

    def _missing_table(self, exc: BaseException) -> bool:
        cause = exc if isinstance(exc, psycopg.Error) else exc.__cause__
        return isinstance(cause, psycopg.errors.UndefinedTable)

    def new_key_insert(
        self, row: KeyRow, check: str, master_id: str, unassigned: UUID | None
    ) -> tuple[str, tuple[Any, ...]]:
        """The insert of a subject's new key row with its first records (``new_keys``),
        as ``SQLiteKeyTable.new_key_insert``'s (the recorder's one-statement form of it
        is ``persistence.pgkeyrows``)."""
        return (
            f"INSERT INTO {self.keys} (key_id, subject, wrapped_key, master_id, created_at) "
            "SELECT %s::bytea, %s::text, %s::bytea, %s::text, %s::timestamptz WHERE EXISTS "
            f"(SELECT 1 FROM {self.keys} WHERE subject = %s AND master_id = %s) AND NOT EXISTS "
            f"(SELECT 1 FROM {self.subjects} WHERE conversation_id = %s::uuid) "
            "ON CONFLICT (subject) DO NOTHING",
            (*self._params(row)[:5], check, master_id, unassigned),
        )

    def _before_tombstone(self, cursor: Any, subject: str) -> None:
        # The row exclusively: a write holding it (FOR KEY SHARE, key_fence) commits first;
        # a write after this sees the tombstone.
        cursor.execute(self._sql(f"SELECT key_id FROM {self.keys} WHERE subject = ? FOR UPDATE"), (subject,))
        cursor.fetchall()
