"""The SQLite store's recorder: a save without the library's wrappers.

``SQLiteConversationRecorder`` (``SQLiteConversationFactory``, which ``stores``
extends) writes a save on the pool's writer connection as the library does --
``BEGIN``, one ``INSERT`` per event, ``COMMIT`` -- without the library's four nested
context managers and cursor wrappers around those statements; a save of one event
(the usual append) is its ``INSERT`` alone, in autocommit, which SQLite runs as its
own transaction. sqlite3's errors become eventsourcing's (``dbapi_errors``).

A record under data keys is inserted only if the key table holds each of them
unerased, checked by its ``INSERT`` itself, under the write lock (``key_fence``): a
write refused so raises ``ConversationErasedError`` and stores nothing of the save.
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Sequence
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteFactory

from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.persistence.dbapi_errors import persistence_error

__all__ = ["SQLiteConversationFactory", "SQLiteConversationRecorder"]


class SQLiteConversationRecorder(SQLiteApplicationRecorder):
    """eventsourcing's SQLite application recorder with a leaner save (see the module
    doc): the same connection, statements and transaction."""

    #: The write fence of the store's key table (set by ``SubjectKeysFactory``).
    fence: KeyFence | None = None

    def _fenced_statement(self, fence: KeyFence, count: int) -> str:
        """The insert of one record naming ``count`` data keys: it inserts nothing
        unless the key table holds all of them unerased (built once per count)."""
        statements: dict[int, str] = self.__dict__.setdefault("_fenced", {})
        found = statements.get(count)
        if found is None:
            marks = ", ".join("?" * count)
            found = statements[count] = (
                f"INSERT INTO {self.events_table_name} (originator_id, originator_version, topic, state) "
                f"SELECT ?, ?, ?, ? WHERE (SELECT count(*) FROM {fence.table} WHERE key_id IN ({marks}) "
                f"AND wrapped_key IS NOT NULL) = {count}"
            )
        return found

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if kwargs.get("tracking") is not None:  # a process application's save: the library's path
            library: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return library
        pool = self.datastore.pool
        connection = pool.get_connection(is_writer=True)
        try:
            cursor = connection.cursor().sqlite_cursor
            try:
                # One event alone is one INSERT in autocommit, its own transaction: the
                # library's connections cache one compiled statement, so a BEGIN before
                # it would evict it and every save would compile it again. (commit()
                # and rollback() do nothing where no transaction is open.)
                if len(stored_events) != 1 or cursor.connection.in_transaction:
                    cursor.execute("BEGIN")
                try:
                    ids: list[int] = []
                    statement = self.insert_events_statement
                    fence = self.fence
                    refused: StoredEvent | None = None
                    for e in stored_events:
                        oid = e.originator_id
                        key = oid.hex if isinstance(oid, UUID) else oid
                        named = None if fence is None else fence.key_ids(bytes(e.state))
                        if named is None:
                            cursor.execute(statement, (key, e.originator_version, e.topic, e.state))
                        else:
                            assert fence is not None
                            cursor.execute(
                                self._fenced_statement(fence, len(named)),
                                (key, e.originator_version, e.topic, e.state, *named),
                            )
                            if cursor.rowcount != 1:  # a key is erased: none of the save
                                cursor.connection.rollback()
                                refused = e
                                break
                        ids.append(cast(int, cursor.lastrowid))  # set by every INSERT
                    else:
                        cursor.connection.commit()
                except BaseException:
                    cursor.connection.rollback()
                    raise
            finally:
                cursor.close()
        except sqlite3.Error as exc:
            raise persistence_error(exc, sqlite3) from exc
        finally:
            pool.put_connection(connection)
        if refused is not None:  # told once the writer connection is back in the pool
            assert fence is not None
            raise fence.error([refused])
        return ids


class _MostRecentFirst(deque[Any]):
    """A connection pool's idle connections, handed out most recently returned first.

    eventsourcing's pool hands its connections round in turn (``popleft``, and
    returns go to the right). A SQLite connection's page cache is dropped whenever
    another connection has written, so with connections taken in turn every save
    read its pages again from the file (six reads per append); the connection used
    last is warm."""

    def popleft(self) -> Any:
        return self.pop()


class SQLiteConversationFactory(SQLiteFactory):
    """eventsourcing's SQLite factory with ``SQLiteConversationRecorder``, and a pool
    that hands out its most recently used connection first (``_MostRecentFirst``)."""

    application_recorder_class = SQLiteConversationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool: Any = self.datastore.pool
        idle = getattr(pool, "_pool", None)
        if isinstance(idle, deque):  # the library's pool as this version knows it
            pool._pool = _MostRecentFirst(idle)
