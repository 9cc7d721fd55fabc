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
A subject's first key is inserted in the transaction of its first records
(``map_and_insert``, ``keys.new_keys``), not in one of its own.

A conversation's events (``select_events``: all of them, or those after a version, as a
query asks whether the cached copy is still current) are read the same way: one
``SELECT`` on a reader connection of the pool, in autocommit (a statement alone is its
own read transaction), without the library's ``BEGIN`` and wrappers.
"""

from __future__ import annotations

import sqlite3
import time
from collections import deque
from collections.abc import Sequence
from typing import Any, cast
from uuid import UUID

from eventsourcing.persistence import (
    ConnectionPoolClosedError,
    ConnectionUnavailableError,
    InterfaceError,
    Mapper,
    StoredEvent,
)
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteFactory,
)

from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.keys.key_tables import key_row
from contextledger.infrastructure.keys.new_keys import deferring
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

    def map_and_insert(self, mapper: Mapper[Any], events: Sequence[Any]) -> None:
        """Map ``events`` and insert them, the rows of their subjects' new data keys in
        the same transaction (``new_keys``); mapped again when a new key was not stored
        (its subject got a key or a tombstone meanwhile, or the master key changed)."""
        fence = self.fence
        fresh = None if fence is None else fence.fresh
        to_stored = mapper.to_stored_event
        for _ in range(3 if fresh is not None else 0):
            with deferring():
                stored = [to_stored(e) for e in events]
            try:
                self._insert(stored, remap=True)
                return
            except _NewKeyLost as lost:
                assert fresh is not None
                fresh.new_keys.lose(lost.key_ids)
        self.insert_events([to_stored(e) for e in events])  # keys stored first, on their own

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """The events of ``originator_id`` in version order (the library's query and
        result), read in one ``SELECT`` on a reader connection in autocommit; a whole
        conversation with its subject's key row, when the key table is the store's own
        (``KEYED_READ``)."""
        oid = originator_id.hex if isinstance(originator_id, UUID) else originator_id
        params: list[Any] = [oid]
        fence = self.fence
        keyed = (
            gt is None
            and lte is None
            and not desc
            and limit is None
            and fence is not None
            and fence.fresh is not None
            and fence.learn is not None
            and not self.__dict__.get("_unkeyed", False)
        )
        own = _own_subject(originator_id) if keyed else None
        if own is not None:
            assert fence is not None
            statement = self._keyed_statement(fence)
            params.append(own)
        else:
            keyed = False
            statement = self._select_statement(gt is not None, lte is not None, desc, limit is not None)
            if gt is not None:
                params.append(gt)
            if lte is not None:
                params.append(lte)
            if limit is not None:
                params.append(limit)
        pool = self.datastore.pool
        connection = pool.get_connection(is_writer=False)
        try:
            cursor = connection.cursor().sqlite_cursor
            try:
                cursor.row_factory = None  # plain tuples
                rows = cursor.execute(statement, params).fetchall()
            finally:
                cursor.close()
        except sqlite3.Error as exc:
            if keyed and "no such table" in str(exc):  # a store made before its key tables
                self.__dict__["_unkeyed"] = True
                return self.select_events(originator_id)
            raise persistence_error(exc, sqlite3) from exc
        finally:
            pool.put_connection(connection)
        if not rows:
            return []
        if keyed:
            assert fence is not None and fence.learn is not None
            first = rows[0]
            if first[4] is not None:  # the subject's key row, on the first event's
                fence.learn(key_row(first[4:]))
        as_uuid = self.datastore.originator_id_type == "uuid"
        same = UUID(rows[0][0]) if as_uuid else rows[0][0]  # one originator: converted once
        return [  # a keyed row's key columns after the first four: not copied off
            StoredEvent(originator_id=same, originator_version=row[1], topic=row[2], state=row[3])
            for row in rows
        ]

    def _keyed_statement(self, fence: KeyFence) -> str:
        """The read of a whole conversation with its subject's key row (``KEYED_READ``)."""
        found: str | None = self.__dict__.get("_keyed")
        if found is None:
            found = self.__dict__["_keyed"] = KEYED_READ.format(
                events=self.events_table_name, keys=fence.table, subjects=fence.subjects
            )
        return found

    def _select_statement(self, gt: bool, lte: bool, desc: bool, limit: bool) -> str:
        """The library's query for these conditions, built once each."""
        statements: dict[tuple[bool, bool, bool, bool], str] = self.__dict__.setdefault("_selects", {})
        shape = (gt, lte, desc, limit)
        found = statements.get(shape)
        if found is None:
            found = (
                "SELECT originator_id, originator_version, topic, state "
                f"FROM {self.events_table_name} WHERE originator_id=? "
                + ("AND originator_version>? " if gt else "")
                + ("AND originator_version<=? " if lte else "")
                + ("ORDER BY originator_version " + ("DESC " if desc else "ASC "))
                + ("LIMIT ? " if limit else "")
            )
            statements[shape] = found
        return found

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if kwargs.get("tracking") is not None:  # a process application's save: the library's path
            library: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return library
        return self._insert(stored_events, remap=False)

    def _insert(self, stored_events: Sequence[StoredEvent], *, remap: bool) -> list[int]:
        """Insert the records (and the rows of the new keys they name) in one transaction;
        ``remap``: a refusal caused by a new key not stored is ``_NewKeyLost``."""
        fence = self.fence
        named = [None if fence is None else fence.key_ids(bytes(e.state)) for e in stored_events]
        fresh = None if fence is None else fence.fresh
        new_rows = (
            []
            if fresh is None
            else fresh.new_keys.inserts([k for n in named for k in n or ()], fresh.master_id)
        )
        pool = self.datastore.pool
        # The pool's kept writer, unless reads and writes exclude each other (memory).
        lean = pool if isinstance(pool, _CachingPool) and not pool._mutually_exclusive_read_write else None
        connection = pool.get_connection(is_writer=True) if lean is None else lean.take_writer()
        try:
            cursor = connection.cursor().sqlite_cursor
            try:
                # One event alone is one INSERT in autocommit, its own transaction: the
                # library's connections cache one compiled statement, so a BEGIN before
                # it would evict it and every save would compile it again. (commit()
                # and rollback() do nothing where no transaction is open.)
                if len(stored_events) != 1 or new_rows or cursor.connection.in_transaction:
                    cursor.execute("BEGIN")
                try:
                    ids: list[int] = []
                    statement = self.insert_events_statement
                    refused: StoredEvent | None = None
                    # A subject's new key, before its records. A row this transaction
                    # inserted is live and stays so until it commits (it holds the write
                    # lock): a record naming only such keys needs no fence of its own.
                    inserted: set[bytes] = set()
                    for key_id, key_sql, key_params in new_rows:
                        cursor.execute(key_sql, key_params)
                        if cursor.rowcount != 1:  # not stored: its records are refused
                            cursor.connection.rollback()
                            refused = _naming(stored_events, named, key_id)
                            break
                        inserted.add(key_id)
                    for e, keys in zip(stored_events, named, strict=True):
                        if refused is not None:
                            break
                        oid = e.originator_id
                        key = oid.hex if isinstance(oid, UUID) else oid
                        if keys is None or (inserted and inserted.issuperset(keys)):
                            cursor.execute(statement, (key, e.originator_version, e.topic, e.state))
                        else:
                            assert fence is not None
                            cursor.execute(
                                self._fenced_statement(fence, len(keys)),
                                (key, e.originator_version, e.topic, e.state, *keys),
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
            if lean is None:
                pool.put_connection(connection)
            else:
                lean.return_writer()
        if refused is not None:  # told once the writer connection is back in the pool
            assert fence is not None
            named_ids = [k for n in named for k in n or ()]
            if remap and (new_rows or (fresh is not None and fresh.new_keys.lost(named_ids))):
                # A new key's row was not stored (here, or by the thread that made it): map again.
                raise _NewKeyLost([key_id for key_id, _, _ in new_rows])
            raise fence.error([refused])
        if new_rows:
            assert fresh is not None
            fresh.settle([key_id for key_id, _, _ in new_rows])
        return ids


#: A whole conversation (``?1``: its id as stored) in version order, its first event's
#: row carrying the key row of its subject: the one the conversation names, or its own
#: id (``?2``). The key index is searched for the first event only (any other's
#: subject is NULL), and the subject's row is read once. Its row is handed to the
#: key cache (``KeyFence.learn``), which trusts nothing a read by its id would not.
KEYED_READ = (
    "SELECT e.originator_id, e.originator_version, e.topic, e.state, k.key_id, k.subject, "
    "k.wrapped_key, k.master_id, k.created_at, k.erased_at, k.erase_reason FROM {events} e "
    "LEFT JOIN {keys} k ON k.subject = CASE WHEN e.originator_version = 1 THEN COALESCE("
    "(SELECT subject FROM {subjects} WHERE conversation_id = ?1), ?2) END "
    "WHERE e.originator_id = ?1 ORDER BY e.originator_version ASC"
)


def _own_subject(originator_id: UUID | str) -> str | None:
    """The subject a conversation is when it names none: its id as text (None: the
    originator is no conversation, its id no UUID)."""
    if isinstance(originator_id, UUID):
        return str(originator_id)
    try:
        return str(UUID(originator_id))
    except ValueError:
        return None


def _naming(
    stored_events: Sequence[StoredEvent], named: list[list[bytes] | None], key_id: bytes
) -> StoredEvent:
    """The first of the records that names ``key_id`` (the first record if none does)."""
    for e, keys in zip(stored_events, named, strict=True):
        if keys and key_id in keys:
            return e
    return stored_events[0]


class _NewKeyLost(Exception):
    """A subject's new key was not stored with the save's records (``new_keys``)."""

    def __init__(self, key_ids: list[bytes]) -> None:
        super().__init__("a new data key was not stored")
        self.key_ids = key_ids


class _MostRecentFirst(deque[Any]):
    """A connection pool's idle connections, handed out most recently returned first.

    eventsourcing's pool hands its connections round in turn (``popleft``, and
    returns go to the right). A SQLite connection's page cache is dropped whenever
    another connection has written, so with connections taken in turn every save
    read its pages again from the file (six reads per append); the connection used
    last is warm."""

    def popleft(self) -> Any:
        return self.pop()


#: Compiled statements a connection keeps (Python's default; see ``_CachingPool``).
CACHED_STATEMENTS = 128


class _CachingPool(SQLiteConnectionPool):
    """eventsourcing's SQLite pool, its connections keeping ``CACHED_STATEMENTS``
    compiled statements: the library opens them with ``cached_statements=True``, a
    cache of one, so a statement run after another was compiled again (a subject's
    first write -- BEGIN, its key's row, its record -- evicted the append's INSERT, and
    a reader's queries one another). The connection is otherwise the library's.

    The recorder's saves take the writer through ``take_writer``/``return_writer``: the
    pool's writer lock, as ``get_connection(is_writer=True)`` takes it (so they and the
    library's own writes -- snapshots, tracking -- still write one at a time), and one
    connection the pool keeps checked out for them (counted in use, closed with the
    pool), instead of the pool's queue, conditions and bookkeeping on every save."""

    _writer: SQLiteConnection | None = None

    def take_writer(self) -> SQLiteConnection:
        """The writer connection, holding the pool's writer lock (``return_writer``).

        A connection for it (the first save's, or after it was closed) is taken from the
        pool *outside* the writer lock: taking one waits on the pool's semaphore, which a
        library write waiting for the writer lock holds (taking it under the lock would
        make the two wait for each other until the pool's timeout)."""
        if self._closed:
            raise ConnectionPoolClosedError("Pool is closed")
        spare: SQLiteConnection | None = None
        while True:
            if not self._writer_lock.acquire(timeout=self.pool_timeout):
                if spare is not None:
                    self.put_connection(spare)
                raise ConnectionUnavailableError("Timed out waiting for return of writer")
            writer = self._writer
            if writer is not None and not (writer.closed or writer.closing):
                if spare is not None:  # another save set one meanwhile
                    self.put_connection(spare)
                return writer
            if spare is not None:  # set the one taken, the old one given back
                self._writer = spare
                if writer is not None:
                    self.put_connection(writer)
                return spare
            self._writer_lock.release()
            spare = self.get_connection()

    def return_writer(self) -> None:
        self._writer_lock.release()

    def _create_connection(self) -> SQLiteConnection:
        try:
            c = sqlite3.connect(
                database=self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,  # autocommit, as the library's
                cached_statements=CACHED_STATEMENTS,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
        except (sqlite3.Error, TypeError) as e:
            raise InterfaceError(e) from e
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:  # the library's WAL switch
            if _to_wal(c, self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT):
                self.journal_mode_was_changed_to_wal = True
            self.is_journal_mode_wal = True
        c.row_factory = sqlite3.Row
        return SQLiteConnection(sqlite_conn=c, max_age=self.max_age)


def _to_wal(connection: sqlite3.Connection, timeout: float) -> bool:
    """Switch the file to WAL unless it is (True if this call switched it). Processes
    opening one new file at once race for the exclusive lock the switch needs, and
    SQLite answers the loser "database is locked" at once, without waiting as a busy
    handler would (each holds a shared lock the other's switch waits for): it reads the
    mode again, and tries again until ``timeout`` seconds have passed."""
    deadline = time.monotonic() + timeout
    while True:
        cursor = connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode;")
            if cursor.fetchone()[0].lower() == "wal":
                return False
            cursor.execute("PRAGMA journal_mode=WAL;")
            return True
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() >= deadline:
                raise
        finally:
            cursor.close()
        time.sleep(0.01)


class SQLiteConversationFactory(SQLiteFactory):
    """eventsourcing's SQLite factory with ``SQLiteConversationRecorder``, and a pool
    that hands out its most recently used connection first (``_MostRecentFirst``),
    whose connections keep their compiled statements (``_CachingPool``)."""

    application_recorder_class = SQLiteConversationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        pool: Any = self.datastore.pool
        # A write waits for this process's writer as long as for another process's
        # lock (``Settings.statement_timeout``), not the library's 5 s.
        pool.pool_timeout = float(self.env.get("CL_SQLITE_POOL_TIMEOUT") or pool.pool_timeout)
        if type(pool) is SQLiteConnectionPool:  # the library's, as this version makes it
            pool.__class__ = _CachingPool
        idle = getattr(pool, "_pool", None)
        if isinstance(idle, deque):  # the library's pool as this version knows it
            pool._pool = _MostRecentFirst(idle)
