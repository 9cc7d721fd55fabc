"""The PostgreSQL store's recorder: a leaner write path with every guarantee kept.

``PostgresConversationRecorder`` (selected by ``Database.persistence_env`` through
``PostgresConversationFactory``) keeps every guarantee of eventsourcing's
``PostgresApplicationRecorder`` -- optimistic concurrency on
``(originator_id, originator_version)``, one transaction per save, and a notification
log whose readers never pass over an id that is filled in later -- and costs less per
append:

- **one round trip, no table lock**: a save is one prepared ``INSERT`` in autocommit
  (one event: plain parameters; several: four arrays, sent in binary). The library
  takes the table's ``EXCLUSIVE`` lock and sends ``NOTIFY`` in every inserting
  transaction; both serialize commits (``NOTIFY`` through a cluster-wide lock held
  until the commit is flushed), so concurrent writers could not share the server's
  flushes. Here notification ids come from the sequence as rows are inserted, and
  ``max_notification_id()`` returns the highest id up to which the log is *final*
  (see its doc): readers stop before an id whose transaction is still open;
- **group commit**: concurrent saves in one process share one statement, so one
  transaction and one commit (``group_commit.GroupCommit``). The batch is one
  statement: all of it commits or none of it does. If it fails on a conflict, each
  save of the batch is run again alone, so only the conflicting one gets
  ``IntegrityError``;
- **one warm connection for saves**: the process's saves are written one statement at a
  time (the group commit's leader), so they keep one connection of their own, outside
  the pool, instead of checking one out per save (the pool hands its connections round
  in turn, so each save would wake a server process that had gone cold). A process
  holds the pool's connections plus this one. A lone event is sent through libpq
  directly: a statement prepared once per connection, its four parameters in binary,
  the id read back in binary -- no cursor, no query conversion;
- **no pre-ping**: a connection is used as it is; a failure on a dead one drops it
  (the save connection is opened again, the pool replaces its dead ones) and tries
  once more on a fresh one. A save whose commit answer was lost and whose retry
  conflicts is recognised by the conversation store (``ConversationStore._landed``).

A record under data keys is inserted only if the key table holds each of them
unerased (``key_fence``): the statement takes a shared lock (``FOR KEY SHARE``) on
those key rows and inserts nothing unless all are live; erasure takes the row
exclusively (``FOR UPDATE``) before it destroys the key. A refused save raises
``ConversationErasedError``, in a group commit after the batch is run again save by
save. A subject's first key is inserted with its first record, in the same statement
(``map_and_insert``, ``pgkeyrows``), not in a transaction of its own.

Followers poll (``LogFollower``) and are woken in-process by the ledger's listeners;
``subscribe()`` returns a polling subscription.
"""

from __future__ import annotations

import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import (
    ApplicationRecorder,
    InterfaceError,
    ListenNotifySubscription,
    Mapper,
    OperationalError,
    StoredEvent,
    Subscription,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from psycopg import generators, pq
from psycopg.sql import SQL, Composed, Identifier

from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.keys.new_keys import NewKeyLost, deferring
from contextledger.infrastructure.persistence.dbapi_errors import persistence_error
from contextledger.infrastructure.persistence.group_commit import GroupCommit
from contextledger.infrastructure.persistence.pgkeyrows import FirstWrites, KeyedRead
from contextledger.infrastructure.persistence.pgreads import FinalMark, once_more
from contextledger.infrastructure.persistence.pgstandby import StandbyState, standby_state
from contextledger.infrastructure.persistence.pgstore import (
    SelectEventsOnce,
    TimedPostgresFactory,
    event_columns,
)

__all__ = ["PollingSubscription", "PostgresConversationFactory", "PostgresConversationRecorder"]

#: The lone-event statement on the save connection: its name, its parameters' types
#: (uuid, int8, text, bytea) and formats (all binary); the id comes back in binary.
_ONE_NAME = b"contextledger_append_one"
_ONE_TYPES = [2950, 20, 25, 17]
_BINARY = [1, 1, 1, 1]
#: The lone-event statement of a record naming ``n`` data keys: ``n`` more parameters
#: (bytea), the key ids (``_FENCE``); one statement per ``n``, prepared when first used.
_FENCED_NAME = b"contextledger_append_fenced_%d"
#: The condition that fences a write (``key_fence``): every key id ``{ids}`` names is
#: a key row with a wrapped key, locked ``FOR KEY SHARE`` until the insert commits. An
#: erasure holding the row (``FOR UPDATE``) makes it wait; one committed first leaves
#: the row without a wrapped key, so the count falls short. A master-key rotation
#: re-wrapping the row (``FOR NO KEY UPDATE``) does not. The ids are parameters the
#: primary key's index is searched for (a list, or an array), so that the statement's
#: generic plan reads those rows only: ids cut out of one parameter by a set-returning
#: function left the planner guessing at a thousand of them, and it read the whole table.
_FENCE = (
    "(SELECT count(*) FROM (SELECT 1 FROM {keys} WHERE key_id {ids} "
    "AND wrapped_key IS NOT NULL FOR KEY SHARE) AS live) = {count}"
)
_INT8 = struct.Struct("!q")


class _Mapped:
    """Raise psycopg's errors as eventsourcing's, as the library's recorders do (a plain
    context manager: every save enters it)."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        if isinstance(exc, psycopg.Error):
            raise persistence_error(exc, psycopg) from exc


#: Entered as ``with _MAPPED:`` (it holds no state).
_MAPPED = _Mapped()


class PostgresConversationRecorder(SelectEventsOnce, PostgresApplicationRecorder):
    """eventsourcing's PostgreSQL application recorder with a one-round-trip,
    group-committed save (see the module doc)."""

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "stored_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        schema = Identifier(self.datastore.schema)
        table = Identifier(self.events_table_name)
        # One prepared statement, four arrays of plain types (sent in binary: no
        # per-row composite encoding). No table lock and no NOTIFY: both serialize
        # committing transactions (NOTIFY takes a cluster-wide lock held through the
        # commit). The filter takes the transaction id before the rows draw their
        # notification ids: earlier readers judged gaps by xids and rely on it (this
        # release's readers go by the table's write locks, see ``pgreads``).
        self.append_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT e.o, e.v, e.t, e.s "
            "FROM unnest(%b::uuid[], %b::bigint[], %b::text[], %b::bytea[]) "
            "WITH ORDINALITY AS e (o, v, t, s, n) "
            "WHERE pg_current_xact_id() IS NOT NULL "
            "ORDER BY e.n "
            "RETURNING notification_id AS id"
        ).format(schema=schema, table=table)
        #: Where the log is final (see ``pgreads``).
        self.final_mark = FinalMark(self.datastore, self.events_table_name)
        #: The connection saves are written on (see the module doc), once taken.
        self._writer: psycopg.Connection[Any] | None = None
        self.group_commit = GroupCommit(self._write)
        #: The write fence of the store's key table (set by ``SubjectKeysFactory``),
        #: and whether the save connection has its lone-event statement prepared.
        self.fence: KeyFence | None = None
        self._fence_prepared: set[int] = set()
        #: The saves whose records name new keys (``pgkeyrows``), once there was one; the
        #: full read of a conversation with its key row (``pgkeyrows``), once made.
        self._firsts: FirstWrites | None = None
        self._keyed: KeyedRead | None = None

    # -- writing ----------------------------------------------------------------------

    def insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        if kwargs.get("tracking") is not None:  # a process application's save: the library's path
            ids: Sequence[int] | None = super().insert_events(stored_events, **kwargs)
            return ids
        if not stored_events:
            return []
        try:
            return self.group_commit.submit(stored_events)
        except NewKeyLost:  # a key it names was not stored (mapped elsewhere): refused
            assert self.fence is not None
            raise self.fence.error(stored_events) from None

    def map_and_insert(self, mapper: Mapper[Any], events: Sequence[Any]) -> None:
        """Map ``events`` and insert them, the rows of their subjects' new data keys with
        them (``pgkeyrows``); mapped again when a new key was not stored (its subject got
        a key or a tombstone meanwhile, or the master key changed)."""
        fence = self.fence
        fresh = None if fence is None else fence.fresh
        to_stored = mapper.to_stored_event
        for _ in range(3 if fresh is not None and events else 0):
            with deferring():
                stored = [to_stored(e) for e in events]
            try:
                self.group_commit.submit(stored)
                return
            except NewKeyLost as lost:
                assert fresh is not None
                fresh.new_keys.lose(lost.key_ids)
        self.insert_events([to_stored(e) for e in events])  # keys stored first, on their own

    def _write(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        """Write ``stored_events`` in one statement on the save connection; their ids.
        Called by the group commit's leader only, so one save at a time."""
        try:
            return self._write_on(self._save_connection(), stored_events)
        except (InterfaceError, OperationalError):
            # The connection died (a server restart, a killed backend) or the statement
            # was cancelled: drop it and try once more on a fresh one.
            self.close_save_connection()
            return self._write_on(self._save_connection(), stored_events)

    def _write_on(
        self, conn: psycopg.Connection[Any], stored_events: Sequence[StoredEvent], held: bool = False
    ) -> list[int]:
        fence = self.fence
        if fence is not None and fence.hold is not None:
            # The key table in a database of its own (``key_store``): its key rows held
            # there across the insert, which then runs without the fence's condition.
            if not held:
                return fence.held(stored_events, lambda: self._write_on(conn, stored_events, True))
            fence = None
        named_ids = fence.named(stored_events) if fence is not None else []
        fresh = None if fence is None else fence.fresh
        if fresh is not None and named_ids and (new := fresh.new_keys.held(named_ids)):
            assert fence is not None
            firsts = self._firsts
            if firsts is None:
                firsts = self._firsts = FirstWrites(self.datastore.schema, self.events_table_name, fence)
            with _MAPPED:
                return firsts.write(conn, stored_events, named_ids, new, self._fenced_batch)
        with _MAPPED:
            if len(stored_events) == 1:
                e = stored_events[0]
                oid = e.originator_id
                pg = conn.pgconn
                params = [
                    (oid if isinstance(oid, UUID) else UUID(oid)).bytes,
                    _INT8.pack(e.originator_version),
                    e.topic.encode(),
                    e.state,
                ]
                if named_ids:
                    count = len(named_ids)
                    if count not in self._fence_prepared:
                        self._prepare_fenced(conn, count)
                    params += named_ids
                    pg.send_query_prepared(
                        _FENCED_NAME % count, params, param_formats=[1] * (4 + count), result_format=1
                    )
                else:
                    pg.send_query_prepared(_ONE_NAME, params, param_formats=_BINARY, result_format=1)
                res = conn.wait(generators.execute(pg))[-1]
                if res.status != pq.ExecStatus.TUPLES_OK:
                    raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
                if res.ntuples == 0:  # fenced: a key it names is erased
                    raise self._refused(stored_events, named_ids)
                value = res.get_value(0, 0)
                assert value is not None
                return [_INT8.unpack(value)[0]]
            with conn.cursor() as curs:
                if named_ids:
                    o, v, t, st = event_columns(stored_events)
                    curs.execute(
                        self._fenced_batch(), {"o": o, "v": v, "t": t, "s": st, "k": named_ids}, prepare=True
                    )
                else:
                    curs.execute(self.append_statement, event_columns(stored_events), prepare=True)
                ids = [row["id"] for row in curs.fetchall()]
        if len(ids) != len(stored_events):  # fenced: none of the batch was inserted
            raise self._refused(stored_events, named_ids)
        return ids

    def _refused(self, stored_events: Sequence[StoredEvent], named_ids: list[bytes]) -> Exception:
        """The error of a fenced save: ``NewKeyLost`` if a key it names is a new key
        that was not stored (the events are mapped again), else the fence's."""
        fence = self.fence
        assert fence is not None
        if fence.fresh is not None and fence.fresh.new_keys.lost(named_ids):
            return NewKeyLost([])
        return fence.error(stored_events)

    def _keys_table(self) -> SQL:
        assert self.fence is not None
        return SQL(self.fence.table)  # the key table's quoted, schema-qualified name

    def _fenced_batch(self) -> SQL | Composed:
        """``append_statement`` fenced (``_FENCE``): a fifth parameter holds every key
        id the batch's records name; if one is erased, nothing of the batch is inserted."""
        found: SQL | Composed | None = self.__dict__.get("_fenced_batch_statement")
        if found is None:
            schema = Identifier(self.datastore.schema)
            table = Identifier(self.events_table_name)
            found = SQL(
                "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
                "SELECT e.o, e.v, e.t, e.s "
                "FROM unnest(%(o)b::uuid[], %(v)b::bigint[], %(t)b::text[], %(s)b::bytea[]) "
                "WITH ORDINALITY AS e (o, v, t, s, n) "
                "WHERE pg_current_xact_id() IS NOT NULL AND "
                + _FENCE.format(
                    keys="{keys}", ids="= ANY(%(k)b::bytea[])", count="cardinality(%(k)b::bytea[])"
                )
                + " "
                "ORDER BY e.n "
                "RETURNING notification_id AS id"
            ).format(schema=schema, table=table, keys=self._keys_table())
            self.__dict__["_fenced_batch_statement"] = found
        return found

    def _prepare_fenced(self, conn: psycopg.Connection[Any], count: int) -> None:
        """Prepare the fenced lone-event statement of a record naming ``count`` keys on
        the save connection."""
        ids = "IN (" + ", ".join(f"${5 + i}" for i in range(count)) + ")"
        statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT $1, $2, $3, $4 WHERE pg_current_xact_id() IS NOT NULL AND "
            + _FENCE.format(keys="{keys}", ids=ids, count=count)
            + " RETURNING notification_id"
        ).format(
            schema=Identifier(self.datastore.schema),
            table=Identifier(self.events_table_name),
            keys=self._keys_table(),
        )
        res = conn.pgconn.prepare(
            _FENCED_NAME % count, statement.as_bytes(conn), [*_ONE_TYPES] + [17] * count
        )
        if res.status != pq.ExecStatus.COMMAND_OK:
            raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
        self._fence_prepared.add(count)

    def _save_connection(self) -> psycopg.Connection[Any]:
        """The connection saves are written on: opened once, outside the pool (so the
        pool's size is left to reads) and configured as the pool configures its own,
        with the lone-event statement prepared on it."""
        conn = self._writer
        if conn is not None:
            return conn
        datastore = self.datastore
        pool = datastore.pool
        with _MAPPED:
            given, conninfo = pool.kwargs, pool.conninfo  # values, or callables giving them
            kwargs = dict((given() if callable(given) else given) or {})
            if pool.get_password_func:
                kwargs["password"] = pool.get_password_func()
            conn = pool.connection_class.connect(conninfo() if callable(conninfo) else conninfo, **kwargs)
            try:
                datastore.after_connect_func()(conn)
                statement = SQL(
                    "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
                    "SELECT $1, $2, $3, $4 WHERE pg_current_xact_id() IS NOT NULL "
                    "RETURNING notification_id"
                ).format(schema=Identifier(datastore.schema), table=Identifier(self.events_table_name))
                res = conn.pgconn.prepare(_ONE_NAME, statement.as_bytes(conn), _ONE_TYPES)
                if res.status != pq.ExecStatus.COMMAND_OK:
                    raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
            except BaseException:
                conn.close()
                raise
        self._writer = conn
        self._fence_prepared = set()
        return conn

    def close_save_connection(self) -> None:
        """Close the save connection (the next save opens another)."""
        conn, self._writer = self._writer, None
        self._fence_prepared = set()
        if conn is not None:
            conn.close()

    # -- reading (no library retry loop: one more try on a checked pool; select_events
    # comes from SelectEventsOnce) ---------------------------------------------------

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        """The library's read; a whole conversation with its subject's key row when the
        key table is in this database (``pgkeyrows``)."""
        fence = self.fence
        if (
            gt is not None
            or lte is not None
            or desc
            or limit is not None
            or fence is None
            or fence.fresh is None
        ):
            return super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        keyed = self._keyed
        if keyed is None:
            keyed = self._keyed = KeyedRead(self.datastore.schema, self.events_table_name, fence)

        def read() -> Sequence[StoredEvent] | None:
            with self.datastore.get_connection() as conn:
                return keyed.read(conn, originator_id)

        events: Sequence[StoredEvent] | None = once_more(read, self.datastore)
        if events is None:  # no key tables in this store: the library's read, from now on
            self.fence = replace(fence, fresh=None)
            return super().select_events(originator_id)
        return events

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
        committed: bool = False,
    ) -> Sequence[Any]:
        """The library's read, never past ``max_notification_id()``: an id above it may
        still be filled in by a transaction that has not committed yet. With
        ``committed``, a one-off read of everything committed now (an audit's listing,
        not a follower's position to resume from): it does not wait for the mark."""
        if not committed and (stop is None or stop > self.final_mark.settled):
            horizon = self.max_notification_id() or 0
            stop = horizon if stop is None else min(stop, horizon)
        raw: Any = PostgresApplicationRecorder.select_notifications.__wrapped__
        read = lambda: raw(self, start, limit, stop, topics, inclusive_of_start=inclusive_of_start)  # noqa: E731
        return once_more(read, self.datastore)

    def max_notification_id(self) -> int | None:
        """The highest notification id up to which the log is final: every lower id is
        committed or will never be (a rolled-back or conflicting insert leaves a gap).
        Ids below the first gap are final at once; past one, once no transaction that
        was writing to the event table when the gap was seen still is (``pgreads``).
        None while the log is empty."""
        top: int | None = once_more(self.final_mark.top, self.datastore)
        return top

    def max_committed_notification_id(self) -> int | None:
        """The highest notification id committed now (None while the log is empty): above
        ``max_notification_id()`` while a lower id's transaction may still commit."""
        committed: int | None = once_more(self.final_mark.committed_top, self.datastore)
        return committed

    def writers_in_flight(self) -> list[int]:
        """Server processes (pids) of other sessions with an open transaction writing to
        the event table: what holds ``max_notification_id()`` below the committed top."""
        pids: list[int] = once_more(self.final_mark.writers, self.datastore)
        return pids

    def standby_state(self) -> StandbyState:
        """Whether the server read is a hot standby, and its replay lag (``pgstandby``)."""
        state: StandbyState = once_more(lambda: standby_state(self.datastore), self.datastore)
        return state

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        """eventsourcing's subscription, woken by a poll instead of NOTIFY (saves do not
        notify; see the class doc)."""
        return PollingSubscription(self, gt=gt, topics=topics)


class PollingSubscription(ListenNotifySubscription[PostgresConversationRecorder]):
    """A subscription that looks for new notifications every ``interval`` seconds."""

    interval = 0.1

    def __init__(
        self, recorder: PostgresConversationRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._ticker = threading.Thread(target=self._tick, daemon=True)
        self._ticker.start()

    def __exit__(self, *args: object, **kwargs: Any) -> None:
        try:
            super().__exit__(*args, **kwargs)
        finally:
            self._ticker.join()

    def _tick(self) -> None:
        while not self._has_been_stopped:
            time.sleep(self.interval)
            self._has_been_notified.set()


class PostgresConversationFactory(TimedPostgresFactory):
    """eventsourcing's PostgreSQL factory with ``PostgresConversationRecorder``, and the
    connect and statement timeouts of ``TimedPostgresFactory``."""

    application_recorder_class = PostgresConversationRecorder

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self._recorders: list[PostgresConversationRecorder] = []

    def application_recorder(self) -> ApplicationRecorder:
        recorder = super().application_recorder()
        if isinstance(recorder, PostgresConversationRecorder):
            self._recorders.append(recorder)
        return recorder

    def close(self) -> None:
        for recorder in self._recorders:
            recorder.close_save_connection()
        super().close()
