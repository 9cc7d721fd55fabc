"""The SQLite store's recorder: a save without the library's wrappers.

``SQLiteConversationRecorder`` (``SQLiteConversationFactory``, which ``stores``
extends) writes a save on the pool's writer connection as the library does --
``BEGIN``, one ``INSERT`` per event, ``COMMIT`` -- without the library's four nested
context managers and cursor wrappers around those statements; a save of one event
(the usual append) is its ``INSERT`` alone, in autocommit, which SQLite runs as its
own transaction. sqlite3's errors become eventsourcing's (``dbapi_errors``).
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Sequence
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteFactory

from contextledger.infrastructure.persistence.dbapi_errors import persistence_error

__all__ = ["SQLiteConversationFactory", "SQLiteConversationRecorder"]


class SQLiteConversationRecorder(SQLiteApplicationRecorder):
    """eventsourcing's SQLite application recorder with a leaner save (see the module
    doc): the same connection, statements and transaction."""

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
                    for e in stored_events:
                        oid = e.originator_id
                        key = oid.hex if isinstance(oid, UUID) else oid
                        cursor.execute(statement, (key, e.originator_version, e.topic, e.state))
                        ids.append(cast(int, cursor.lastrowid))  # set by every INSERT
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
