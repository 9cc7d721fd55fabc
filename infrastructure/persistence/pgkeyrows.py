"""Key rows that ride with the records on PostgreSQL: written with a subject's first
record (``FirstWrites``), read with a conversation's events (``KeyedRead``) or its
latest snapshot (``KeyedSnapshotRead``).

**Written.** The PostgreSQL recorder (``pgrecorder``) maps a save's events
``deferring()`` as the SQLite recorder does (``keys.new_keys``): a subject without a key row gets a new key
held in the process, its records are encrypted under it, and the key's row is written
with them, never on its own. ``FirstWrites`` writes such a save:

- one record naming one key, a new one (a conversation's first append): **one
  statement**, prepared once per save connection, in autocommit. A CTE inserts the
  new key's row (``ON CONFLICT (subject) DO NOTHING``) only if the table's check row
  names this process's master key and, when the conversation is taken to be its own
  subject, it names no subject; the record is inserted only if the row was (the
  statement does not see its CTE's row: it counts through ``RETURNING``). This is the
  write fence of such a record (``key_fence``): its one key is live, being inserted
  by this transaction, and an erasure of its subject waits on the row's unique
  subject until the transaction ends. So the record and its key's row commit
  together, or neither is stored;
- anything else (a batch of the group commit, a record naming other keys too): one
  transaction, ``BEGIN``, the rows of the new keys (each inserted as above, ``new_keys``),
  the fenced insert of the records, ``COMMIT``; rolled back if one of them is refused.

A refused save whose records name a new key raises ``NewKeyLost``: another process
made the subject's key first, or erased it, or the master key changed; nothing of the
save is stored and the recorder maps the events again, now with the table's key. Two
processes writing one subject's first record at once so converge on one key: the
unique subject lets one row in, the other waits for it and inserts nothing.

**Read.** A process that loads a conversation it has not read yet (a cold load)
decrypts its records under the key they name, read from the key table: one more query per
conversation. With the key table in the event store's own database, the PostgreSQL
recorder reads a whole conversation (``select_events`` from its start) with the key
row of its subject in the same statement (``KeyedRead``): the subject the
conversation names (``<prefix>_conversation_subjects``), or its own id; the row rides
on the first event's row. The row is handed to the key cache (``KeyFence.learn``),
so the records that name it decrypt without a query of their own. A cold load of a
conversation with a snapshot reads the latest snapshot first, then the events after it:
that snapshot's read brings the key row the same way (``KeyedSnapshotRead``, by the
snapshots' recorder). A record naming another key (a fork's, a moved conversation's)
is read as before, by its id.

Nothing is trusted from the row that a key read by its id would not be: the cache
unwraps it the same way (a tombstone is cached as a tombstone), and a row under
another master key is left alone (the read by id then says why it cannot be used).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg import generators, pq
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier

from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.keys.key_tables import key_row
from contextledger.infrastructure.keys.new_keys import NewKey, NewKeyLost
from contextledger.infrastructure.keys.wrapping import CHECK_SUBJECT

__all__ = ["FirstWrites", "KeyedRead", "KeyedSnapshotRead"]

#: The one-statement first record: its name, its parameters' types and formats:
#: the record's four (uuid, int8, text, bytea), then the new key's row (key id,
#: subject, wrapped key, master id, created at), the check row's subject and master
#: id, and the conversation taken to be its own subject (or NULL). All binary but
#: the time, sent as text.
_FIRST_NAME = b"contextledger_append_first"
_FIRST_TYPES = [2950, 20, 25, 17, 17, 25, 17, 25, 1184, 25, 25, 2950]
_FIRST_FORMATS = [1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1]


class FirstWrites:
    """The saves of one recorder whose records name new keys (see the module doc)."""

    def __init__(self, schema: str, events_table: str, fence: KeyFence) -> None:
        self.fence = fence
        self._schema = schema
        self._events_table = events_table
        #: The save connection the one-statement insert is prepared on.
        self._prepared_on: psycopg.Connection[Any] | None = None

    def write(
        self,
        conn: psycopg.Connection[Any],
        stored_events: Sequence[StoredEvent],
        named: list[bytes],
        new: list[NewKey],
        fenced_batch: Callable[[], SQL | Composed],
    ) -> list[int]:
        """Insert ``stored_events`` (naming the key ids ``named``) and the rows of the new
        keys ``new``, all or nothing; their ids. ``NewKeyLost`` if refused."""
        fresh = self.fence.fresh
        assert fresh is not None
        if len(stored_events) == 1 and len(new) == 1 and named == [new[0].key.key_id]:
            ids = self._one(conn, stored_events[0], new[0], fresh.master_id)
        else:
            ids = self._in_transaction(conn, stored_events, named, new, fresh.master_id, fenced_batch)
        new_ids = [n.key.key_id for n in new]
        if ids is None:
            raise NewKeyLost(new_ids)
        fresh.settle(new_ids)
        return ids

    def _one(
        self, conn: psycopg.Connection[Any], e: StoredEvent, new: NewKey, master_id: str
    ) -> list[int] | None:
        if self._prepared_on is not conn:
            self._prepare(conn)
        oid = e.originator_id
        row = new.row
        params: list[bytes | None] = [
            (oid if isinstance(oid, UUID) else UUID(oid)).bytes,
            e.originator_version.to_bytes(8, "big", signed=True),
            e.topic.encode(),
            e.state,
            row.key_id,
            row.subject.encode(),
            row.wrapped_key,
            row.master_id.encode(),
            row.created_at.isoformat().encode(),
            CHECK_SUBJECT.encode(),
            master_id.encode(),
            None if new.unassigned is None else new.unassigned.bytes,
        ]
        pg = conn.pgconn
        pg.send_query_prepared(_FIRST_NAME, params, param_formats=_FIRST_FORMATS, result_format=1)
        res = conn.wait(generators.execute(pg))[-1]
        if res.status != pq.ExecStatus.TUPLES_OK:
            raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
        if res.ntuples == 0:
            return None
        value = res.get_value(0, 0)
        assert value is not None
        return [int.from_bytes(value, "big", signed=True)]

    def _prepare(self, conn: psycopg.Connection[Any]) -> None:
        keys, subjects = SQL(self.fence.table), SQL(self.fence.subjects)
        statement = SQL(
            "WITH k AS (INSERT INTO {keys} (key_id, subject, wrapped_key, master_id, created_at) "
            "SELECT $5, $6, $7, $8, $9 "
            "WHERE EXISTS (SELECT 1 FROM {keys} WHERE subject = $10 AND master_id = $11) "
            "AND NOT EXISTS (SELECT 1 FROM {subjects} WHERE conversation_id = $12) "
            "ON CONFLICT (subject) DO NOTHING RETURNING 1) "
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state) "
            "SELECT $1, $2, $3, $4 WHERE pg_current_xact_id() IS NOT NULL AND EXISTS (SELECT 1 FROM k) "
            "RETURNING notification_id"
        ).format(
            keys=keys,
            subjects=subjects,
            schema=Identifier(self._schema),
            table=Identifier(self._events_table),
        )
        res = conn.pgconn.prepare(_FIRST_NAME, statement.as_bytes(conn), _FIRST_TYPES)
        if res.status != pq.ExecStatus.COMMAND_OK:
            raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)
        self._prepared_on = conn

    def _in_transaction(
        self,
        conn: psycopg.Connection[Any],
        stored_events: Sequence[StoredEvent],
        named: list[bytes],
        new: list[NewKey],
        master_id: str,
        fenced_batch: Callable[[], SQL | Composed],
    ) -> list[int] | None:
        fresh = self.fence.fresh
        assert fresh is not None
        insert = fresh.new_keys.insert
        assert insert is not None
        columns = (
            [e.originator_id for e in stored_events],
            [e.originator_version for e in stored_events],
            [e.topic for e in stored_events],
            [e.state for e in stored_events],
        )
        # ROLLBACK sent through libpq: psycopg deallocates every prepared statement of
        # a connection that rolls back (the recorder's too).
        with conn.cursor() as curs:
            curs.execute("BEGIN")
            try:
                for n in new:  # the subjects' new keys, before their records
                    sql, params = insert(n.row, CHECK_SUBJECT, master_id, n.unassigned)
                    curs.execute(sql, params, prepare=True)
                    if curs.rowcount != 1:
                        raise _Refused
                o, v, t, s = columns
                curs.execute(fenced_batch(), {"o": o, "v": v, "t": t, "s": s, "k": named}, prepare=True)
                ids = [row["id"] for row in curs.fetchall()]
                if len(ids) != len(stored_events):
                    raise _Refused
            except BaseException as exc:
                try:
                    _command(conn, b"ROLLBACK")
                except psycopg.Error:
                    if not isinstance(exc, psycopg.Error):
                        raise
                    raise exc from None  # the connection's failure, not the rollback's
                if isinstance(exc, _Refused):  # nothing of the save is stored
                    return None
                raise
            curs.execute("COMMIT")
        return ids


def _command(conn: psycopg.Connection[Any], command: bytes) -> None:
    """Run ``command`` on ``conn`` through libpq, unseen by psycopg's statement cache."""
    pg = conn.pgconn
    pg.send_query(command)
    res = conn.wait(generators.execute(pg))[-1]
    if res.status != pq.ExecStatus.COMMAND_OK:
        raise psycopg.errors.error_from_result(res, encoding=conn.info.encoding)


class _Refused(Exception):
    """A new key's row or a record was refused: the transaction is rolled back."""


#: The subject's key row, for the conversation ``%(o)s`` (its own id as text ``%(own)s``
#: when it names no subject), and the columns a keyed read adds to each record's.
_KEY_ROW = (
    "WITH k AS MATERIALIZED (SELECT key_id, subject, wrapped_key, master_id, created_at, "
    "erased_at, erase_reason FROM {keys} WHERE subject = COALESCE("
    "(SELECT subject FROM {subjects} WHERE conversation_id = %(o)s), %(own)s)) "
)
_KEY_COLUMNS = "k.key_id, k.subject, k.wrapped_key, k.master_id, k.created_at, k.erased_at, k.erase_reason"


def _keyed(statement: str, schema: str, table: str, fence: KeyFence) -> Composed:
    """``statement`` after the key row's ``WITH``, its names filled in."""
    names = {"keys": SQL(fence.table), "subjects": SQL(fence.subjects)}
    return SQL(_KEY_ROW + statement).format(**names, schema=Identifier(schema), table=Identifier(table))


def _as_uuid(originator_id: UUID | str) -> UUID:
    return originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))


def _read_keyed(
    conn: psycopg.Connection[Any], statement: Composed, params: dict[str, Any], fence: KeyFence
) -> Sequence[StoredEvent] | None:
    """The records a keyed statement reads, the key row on the first learnt; None if the
    store has no key tables (made before them: nothing names a key). The rows are read
    as tuples: eleven columns a row, the key's seven NULL but on the first."""
    with conn.cursor(row_factory=tuple_row) as curs:
        try:
            curs.execute(statement, params, prepare=True)
        except psycopg.errors.UndefinedTable:
            return None
        rows = curs.fetchall()
    if rows and rows[0][4] is not None and fence.learn is not None:
        fence.learn(key_row(rows[0][4:]))
    return [
        StoredEvent(originator_id=row[0], originator_version=row[1], topic=row[2], state=bytes(row[3]))
        for row in rows
    ]


class KeyedRead:
    """The full read of a conversation with its subject's key row (see the module doc)."""

    def __init__(self, schema: str, events_table: str, fence: KeyFence) -> None:
        self.fence = fence
        self.statement = _keyed(
            f"SELECT e.originator_id, e.originator_version, e.topic, e.state, {_KEY_COLUMNS} "
            "FROM {schema}.{table} e LEFT JOIN k ON e.originator_version = 1 "
            "WHERE e.originator_id = %(o)s ORDER BY e.originator_version ASC",
            schema,
            events_table,
            fence,
        )

    def read(self, conn: psycopg.Connection[Any], originator_id: UUID | str) -> Sequence[StoredEvent] | None:
        """The conversation's events in version order, its subject's key row learnt;
        None if the store has no key tables."""
        oid = _as_uuid(originator_id)
        return _read_keyed(conn, self.statement, {"o": oid, "own": str(oid)}, self.fence)


class KeyedSnapshotRead:
    """The latest snapshot of a conversation (at or below a version) with its subject's
    key row, in one statement: a cold load reads the snapshot before the events after
    it, so the key the events' read would bring (``KeyedRead`` reads only whole
    conversations) would otherwise be looked up by its id, a round trip of its own."""

    def __init__(self, schema: str, snapshots_table: str, fence: KeyFence) -> None:
        self.fence = fence
        self.statement = _keyed(
            f"SELECT s.originator_id, s.originator_version, s.topic, s.state, {_KEY_COLUMNS} FROM ("
            "SELECT * FROM {schema}.{table} WHERE originator_id = %(o)s "
            "AND originator_version <= COALESCE(%(lte)s::bigint, originator_version) "
            "ORDER BY originator_version DESC LIMIT 1) s LEFT JOIN k ON true",
            schema,
            snapshots_table,
            fence,
        )

    def read(
        self, conn: psycopg.Connection[Any], originator_id: UUID | str, lte: int | None
    ) -> Sequence[StoredEvent] | None:
        """The snapshot (none, or one), its subject's key row learnt; None if the store
        has no key tables."""
        oid = _as_uuid(originator_id)
        params = {"o": oid, "own": str(oid), "lte": lte}
        return _read_keyed(conn, self.statement, params, self.fence)
