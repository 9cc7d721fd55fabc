"""Reading a PostgreSQL store on a hot standby: the primary's published final mark,
and how far behind the standby is.

A follower decides where the log is final (``pgreads.FinalMark``). Past a gap in the
notification ids, the primary's rule asks ``pg_locks`` which transactions hold a
write lock on the event table. A hot standby cannot answer that question: its
``pg_locks`` shows none of the primary's open transactions (only the
``ACCESS EXCLUSIVE`` locks replayed from WAL), and a transaction that has drawn an id
from the sequence may not even be known to the standby before its first heap WAL
record is replayed. A reader on a standby going by its own ``pg_locks`` would pass a
gap that a later commit fills: the event would be missed for good.

So a standby trusts no gap of its own. What it may trust:

- ids up to the first gap it sees: every one of them is visible in its snapshot, so
  committed on the primary; nothing below the highest of them is missing;
- ids up to the **published mark**: a one-row table next to the event table
  (``<events>_final``) holding a notification id that the primary's own finality
  check found final -- every lower id committed or never to be. The primary writes
  it (``publish``) after that check, in a transaction of its own, so its commit
  record comes after the commit records of every id it covers in the primary's WAL.
  A standby replays WAL in order and its snapshots are consistent with what it has
  replayed: a snapshot that sees the published value sees every commit it covers.
  Read in the same statement (one snapshot) as the ids, the mark is safe to pass.

The primary's mark is published by any reader of the log on the primary whose check
passes a gap: the summarization policy each writing ledger runs by default, a
``contextledger worker``. Only passing a gap needs it (a run without gaps is final on
the standby by the first rule), so the common case writes nothing. Were no reader of
the log running on the primary, a standby follower would stop at the first id that
never committed (a rolled-back save), and wait there until one runs -- never past it.

The table is made by the first publication (``CREATE TABLE IF NOT EXISTS``: stores
made before it have none); a standby that finds none reads 0. A session that may not
write (a read-only ledger on the primary) publishes nothing.

``standby_state`` reports whether a server is a standby and its replay lag: the
bytes of WAL received and not yet replayed, and the seconds since the commit
replayed last was made on the primary (this one grows while the primary is idle:
nothing is missing then, the bytes say so).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from eventsourcing.postgres import PostgresDatastore
from psycopg.sql import SQL, Composed, Identifier, Literal

__all__ = ["PublishedMark", "StandbyState", "standby_report", "standby_state"]


class PublishedMark:
    """The statements of one event table's published final mark (see the module doc)."""

    def __init__(self, schema: str, table: str) -> None:
        self.table_name = f"{table}_final"
        name = Identifier(schema, self.table_name)
        qualified = ".".join('"' + part.replace('"', '""') + '"' for part in (schema, self.table_name))
        self.create_statement = SQL(
            "CREATE TABLE IF NOT EXISTS {name} "
            "(id smallint PRIMARY KEY CHECK (id = 1), settled bigint NOT NULL)"
        ).format(name=name)
        self.publish_statement = SQL(
            "INSERT INTO {name} AS m (id, settled) VALUES (1, %(settled)s) "
            "ON CONFLICT (id) DO UPDATE SET settled = greatest(m.settled, excluded.settled)"
        ).format(name=name)
        #: Whether the table exists (read once per look: made by the primary's first
        #: publication, replicated to the standby at any time).
        exists = SQL("SELECT to_regclass({q}) IS NOT NULL AS found")
        self.exists_statement = exists.format(q=Literal(qualified))
        #: The published value, as a scalar subquery to put in the standby's statement.
        self.value: Composed = SQL("(SELECT settled FROM {name} WHERE id = 1)").format(name=name)
        #: False once a publication was refused (a session that may not write).
        self.writable = True
        self._created = False

    def publish(self, curs: Any, settled: int) -> None:
        """Record ``settled`` (final on this primary, just checked) for standbys."""
        if not self.writable:
            return
        try:
            if not self._created:
                curs.execute(self.create_statement, prepare=False)
                self._created = True
            curs.execute(self.publish_statement, {"settled": settled}, prepare=False)
        except Exception as exc:  # psycopg's errors: the connection's transaction is autocommit
            if getattr(exc, "sqlstate", None) in ("25006", "42501"):  # read-only session, no privilege
                self.writable = False
                return
            raise


@dataclass(frozen=True)
class StandbyState:
    """Whether the server read is a hot standby, and its replay lag."""

    standby: bool
    #: WAL received from the primary and not replayed yet (bytes; None on a primary).
    replay_lag_bytes: int | None = None
    #: Seconds since the last replayed commit was made on the primary (None on a
    #: primary, or before the standby replayed any commit).
    replay_lag_seconds: float | None = None


_STATE = SQL(
    "SELECT pg_is_in_recovery() AS standby, "
    "pg_wal_lsn_diff(pg_last_wal_receive_lsn(), pg_last_wal_replay_lsn())::bigint AS lag_bytes, "
    "extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp())::float8 AS lag_seconds"
)


def standby_state(datastore: PostgresDatastore) -> StandbyState:
    """Whether ``datastore``'s server is a standby, and how far behind it is."""
    with datastore.get_connection() as conn, conn.cursor() as curs:
        curs.execute(_STATE, prepare=False)
        row = curs.fetchone()
    assert row is not None
    if not row["standby"]:
        return StandbyState(standby=False)
    lag_bytes = None if row["lag_bytes"] is None else max(0, int(row["lag_bytes"]))
    lag_seconds = None if row["lag_seconds"] is None else max(0.0, float(row["lag_seconds"]))
    return StandbyState(standby=True, replay_lag_bytes=lag_bytes, replay_lag_seconds=lag_seconds)


def standby_report(recorders: Iterable[object]) -> dict[str, Any] | None:
    """For ``stats`` and the viewer: the replay lag of the stores read that are hot
    standbys (the largest of them), or None when none is (or none is PostgreSQL)."""
    states = [state() for r in recorders if callable(state := getattr(r, "standby_state", None))]
    standbys = [s for s in states if isinstance(s, StandbyState) and s.standby]
    if not standbys:
        return None
    lag_bytes = [s.replay_lag_bytes for s in standbys if s.replay_lag_bytes is not None]
    lag_seconds = [s.replay_lag_seconds for s in standbys if s.replay_lag_seconds is not None]
    return {
        "standby": True,
        "replay_lag_bytes": max(lag_bytes) if lag_bytes else None,
        "replay_lag_seconds": round(max(lag_seconds), 3) if lag_seconds else None,
    }
