"""Reading a PostgreSQL store: where the log is final, and bounded retries.

``FinalMark`` keeps the highest notification id up to which a PostgreSQL event table
is *final*: every lower id is committed or never will be. Saves take no table lock
(``pgrecorder``), so notification ids come from a sequence as rows are inserted and
transactions may commit out of id order; a reader that passed over an id still in
flight would miss it for good.

What can still fill in a missing id below the highest visible one: only a
transaction that drew it, and a transaction draws notification ids only by inserting
into the event table, which takes that table's ``ROW EXCLUSIVE`` lock first and holds
it until the transaction ends. Ids are drawn in order (the sequence caches one value),
so when the highest id is seen, whoever drew a lower missing one drew it before, and
is either still holding a write lock on this table or has ended. The lock check runs
after the snapshot that saw the gap; a transaction ends (and becomes visible to later
snapshots) before it releases its locks. So:

- ids below the first gap are final at once (all of them are committed);
- past a gap, the ids up to the highest one are final once no transaction that held
  a write lock on *this* table when the gap was seen still holds one
  (``pg_locks``, by the table's oid in this database). Transactions of other
  sessions that never wrote to this table -- a report, a session left idle in
  transaction on another table or in another database -- hold nothing back, as
  they cannot fill in an id. One that inserted into the event table and stays open
  does hold the mark, as it must: its id may still commit.

Locks a reader or maintenance takes (``ACCESS SHARE``, autovacuum's
``SHARE UPDATE EXCLUSIVE``, an index build's ``SHARE``) draw no ids and are ignored.
``pg_locks`` is read only when a gap is seen: the common case is one statement.

On a hot standby (``pg_is_in_recovery()``, asked in the same statement) ``pg_locks``
says nothing of the primary's transactions: there, past a gap, the mark moves only as
far as the mark the primary published (``pgstandby``, where the reasoning is), and a
mark that passes a gap on the primary is published for its standbys.

These reads run on every follower step, so their cost must not grow with the log: none
is a prepared statement. A prepared statement's cached generic plan is made once, for
the table as it was then; made while the table was small (a page or two, whatever its
statistics), every shape of these queries -- ``max()`` included -- plans a sequential
scan, and that plan stayed in use as the table grew, reading the whole table on each
step until an ``ANALYZE`` invalidated it. Sent unprepared, each run is planned for the
table as it is now and with the mark's value: an index scan of the few ids above the
mark, at any size (``tests/integration/test_postgres_head_plans.py``).

``once_more`` is the store's retry of a read: one more try after a connection that
turned out dead (a restart, a killed backend), none after the pool has waited its
whole ``connect_timeout`` for a connection (the server is away: another try would
only wait as long again). eventsourcing's own recorders retry ten times, each
waiting that long; the store's recorders call the library's methods without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from eventsourcing.persistence import InterfaceError, OperationalError
from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Identifier, Literal
from psycopg_pool import PoolTimeout

from contextledger.infrastructure.persistence.pgstandby import PublishedMark

__all__ = ["WRITE_LOCKS", "FinalMark", "once_more", "pool_timed_out"]

T = TypeVar("T")

#: The table locks a transaction that may have drawn notification ids holds on the
#: event table: an ``INSERT`` takes ``ROW EXCLUSIVE``; the stronger modes are those
#: that allow or imply writing (eventsourcing's own writers lock the table in
#: ``EXCLUSIVE`` mode, then insert).
WRITE_LOCKS = ("RowExclusiveLock", "ShareRowExclusiveLock", "ExclusiveLock", "AccessExclusiveLock")


def pool_timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it was raised from) is the pool giving up waiting for
    a connection: it waited ``connect_timeout`` already."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, PoolTimeout):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def once_more(call: Callable[[], T], datastore: PostgresDatastore) -> T:
    """``call()``; if the connection it used was dead, check the pool (broken
    connections are replaced) and call once more. Not after a pool timeout: the
    server did not answer for the whole ``connect_timeout`` (see the module doc)."""
    try:
        return call()
    except (InterfaceError, OperationalError) as exc:
        if pool_timed_out(exc):
            raise
        datastore.pool.check()
        return call()


class FinalMark:
    """The highest notification id up to which one event table is final (see the
    module doc). ``advance()`` looks at the table and moves the mark as far as is safe."""

    def __init__(self, datastore: PostgresDatastore, table: str) -> None:
        self.datastore = datastore
        schema = Identifier(datastore.schema)
        name = Identifier(table)
        qualified = ".".join('"' + part.replace('"', '""') + '"' for part in (datastore.schema, table))
        # One statement, one snapshot: the highest id, and how many ids lie above the
        # mark up to it (all of them committed: no gap). The count's range is closed at
        # both ends: planned without statistics, a closed range is taken to be narrow,
        # an open one to hold a third of the table (a sequential scan).
        self.top_statement = SQL(
            "SELECT pg_is_in_recovery() AS standby, h.top, (SELECT count(*) FROM {schema}.{table} "
            "WHERE notification_id > %(asked)s AND notification_id <= h.top) AS newer "
            "FROM (SELECT max(notification_id) AS top FROM {schema}.{table}) h"
        ).format(schema=schema, table=name)
        self.committed_statement = SQL("SELECT max(notification_id) AS top FROM {schema}.{table}").format(
            schema=schema, table=name
        )
        # Past a gap, after that snapshot: the end of the unbroken run of ids above the
        # mark, up to the top seen (final: all committed), and the transactions of other
        # sessions holding a write lock on this table now (their virtual transaction ids).
        self.gap_statement = SQL(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM {schema}.{table} WHERE notification_id = %(asked)s + 1) "
            "THEN (SELECT coalesce(min(a.notification_id), %(top)s) FROM {schema}.{table} a "
            "WHERE a.notification_id > %(asked)s AND a.notification_id <= %(top)s "
            "AND NOT EXISTS (SELECT 1 FROM {schema}.{table} b "
            "WHERE b.notification_id = a.notification_id + 1)) "
            "ELSE %(asked)s END AS run, "
            "ARRAY(SELECT DISTINCT l.virtualtransaction FROM pg_locks l "
            "WHERE l.locktype = 'relation' AND l.relation = {regclass}::regclass "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.mode = ANY(%(modes)s) AND l.pid IS DISTINCT FROM pg_backend_pid()) AS writers"
        ).format(schema=schema, table=name, regclass=Literal(qualified))
        # On a standby, past a gap: the end of the unbroken run, and the primary's
        # published mark, in one snapshot (``pgstandby``).
        self.run_statement = SQL(
            "SELECT CASE WHEN EXISTS (SELECT 1 FROM {schema}.{table} WHERE notification_id = %(asked)s + 1) "
            "THEN (SELECT coalesce(min(a.notification_id), %(top)s) FROM {schema}.{table} a "
            "WHERE a.notification_id > %(asked)s AND a.notification_id <= %(top)s "
            "AND NOT EXISTS (SELECT 1 FROM {schema}.{table} b "
            "WHERE b.notification_id = a.notification_id + 1)) "
            "ELSE %(asked)s END AS run"
        ).format(schema=schema, table=name)
        self.published = PublishedMark(datastore.schema, table)
        # Who they are, for an operator (``writers()``).
        self.writers_statement = SQL(
            "SELECT DISTINCT l.pid FROM pg_locks l "
            "WHERE l.locktype = 'relation' AND l.relation = {regclass}::regclass "
            "AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND l.mode = ANY(%(modes)s) AND l.pid IS DISTINCT FROM pg_backend_pid() ORDER BY 1"
        ).format(regclass=Literal(qualified))
        self._lock = threading.Lock()
        #: Every notification id up to this one is final: committed, or never to be.
        self.settled = 0
        #: Whether the server last looked at was a hot standby (see ``pgstandby``).
        self.on_standby = False
        #: ``(top, writers)``: ids up to ``top`` become final once none of ``writers``
        #: (the transactions holding a write lock when a gap was seen) holds one.
        self._pending: tuple[int, frozenset[str]] | None = None

    def top(self) -> int | None:
        """The mark (None while the log is empty), moved as far as is safe now."""
        with self._lock:
            top = self._advance()
            return None if top is None else self.settled or None

    def committed_top(self) -> int | None:
        """The highest notification id committed now (None while the log is empty)."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.committed_statement, prepare=False)
            row = curs.fetchone()
        return None if row is None else row["top"]

    def writers(self) -> list[int]:
        """The server processes (pids) of other sessions whose open transactions hold a
        write lock on the event table: what a mark held below the committed top waits for."""
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.writers_statement, {"modes": list(WRITE_LOCKS)})
            return [int(row["pid"]) for row in curs.fetchall() if row["pid"] is not None]

    def _advance(self) -> int | None:
        """One look at the table: move ``settled`` as far as is safe; the table's top id."""
        asked = self.settled
        with self.datastore.get_connection() as conn, conn.cursor() as curs:
            curs.execute(self.top_statement, {"asked": asked}, prepare=False)
            row = curs.fetchone()
            assert row is not None
            top, newer = row["top"], row["newer"]
            self.on_standby = bool(row["standby"])
            if top is None:
                return None
            if newer == top - asked:  # every id above the mark up to the top is committed
                self.settled, self._pending = max(asked, top), None
                return int(top)
            if self.on_standby:
                self.settled, self._pending = self._standby_run(curs, asked, int(top)), None
                return int(top)
            curs.execute(
                self.gap_statement, {"asked": asked, "top": top, "modes": list(WRITE_LOCKS)}, prepare=False
            )
            gap = curs.fetchone()
        assert gap is not None
        writers = frozenset(gap["writers"] or ())
        run = max(asked, int(gap["run"] or asked))
        settled = run
        pending = self._pending
        if pending is not None and not pending[1] & writers:
            settled, pending = max(settled, pending[0]), None
        if not writers:
            settled, pending = max(settled, int(top)), None
        elif pending is None and top > settled:
            pending = (int(top), writers)
        self.settled, self._pending = settled, pending
        if settled > run:  # passed a gap: a standby may not pass it without this
            with self.datastore.get_connection() as conn, conn.cursor() as curs:
                self.published.publish(curs, settled)
        return int(top)

    def _standby_run(self, curs: Any, asked: int, top: int) -> int:
        """On a standby, past a gap: the end of the unbroken run of ids, or the
        primary's published mark, whichever is further (``pgstandby``)."""
        curs.execute(self.published.exists_statement, prepare=False)
        found = curs.fetchone()
        statement = self.run_statement
        if found is not None and found["found"]:
            statement = SQL("SELECT r.run, {value} AS published FROM ({run}) r").format(
                value=self.published.value, run=self.run_statement
            )
        curs.execute(statement, {"asked": asked, "top": top}, prepare=False)
        row = curs.fetchone()
        assert row is not None
        return max(asked, int(row["run"] or asked), int(row.get("published") or 0))
