"""What an erasure removes from a store beside destroying the key: snapshots.

``delete_snapshots(app, ids)`` deletes every stored snapshot of the conversations
``ids`` from the store of the eventsourcing application ``app`` (a ``Ledger``): a
snapshot holds a conversation's window, and a fork's holds the history it inherited
(under the fork's own key). In SQLite the rows are deleted with ``secure_delete`` on
(the freed bytes are overwritten) and the write-ahead log is checkpointed; in
PostgreSQL the rows are deleted (their space is reused after ``VACUUM``). The
application layer reaches this by its topic (``DELETE_SNAPSHOTS_TOPIC``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import PersistenceError
from eventsourcing.popo import POPOAggregateRecorder
from eventsourcing.postgres import PostgresAggregateRecorder
from eventsourcing.sqlite import SQLiteAggregateRecorder
from psycopg.sql import SQL, Identifier

__all__ = ["DELETE_SNAPSHOTS_TOPIC", "delete_snapshots"]

DELETE_SNAPSHOTS_TOPIC = "contextledger.infrastructure.keys.erasure_store:delete_snapshots"


def delete_snapshots(app: Any, ids: Sequence[UUID]) -> int:
    """Delete the snapshots of conversations ``ids``; how many rows went (module doc)."""
    snapshots = getattr(app, "snapshots", None)
    recorder = getattr(snapshots, "recorder", None)
    if recorder is None or not ids:
        return 0
    if isinstance(recorder, SQLiteAggregateRecorder):
        return _sqlite(recorder, ids)
    if isinstance(recorder, PostgresAggregateRecorder):
        return _postgres(recorder, ids)
    if isinstance(recorder, POPOAggregateRecorder):
        return _memory(recorder, ids)
    return 0


def _sqlite(recorder: SQLiteAggregateRecorder, ids: Sequence[UUID]) -> int:
    datastore = recorder.datastore
    uuid_ids = datastore.originator_id_type == "uuid"
    deleted = 0
    with datastore.transaction(commit=True) as cursor:
        cursor.execute("PRAGMA secure_delete = ON")
        for cid in ids:
            cursor.execute(
                f"DELETE FROM {recorder.events_table_name} WHERE originator_id = ?",
                (cid.hex if uuid_ids else str(cid),),
            )
            deleted += max(cursor.sqlite_cursor.rowcount, 0)
    if deleted:
        try:
            with datastore.get_connection(commit=True) as conn:
                checkpoint = conn.cursor()
                checkpoint.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                checkpoint.fetchall()
        except (PersistenceError, sqlite3.Error):
            pass  # a reader holds the WAL: SQLite checkpoints it later, as it always does
    return deleted


def _postgres(recorder: PostgresAggregateRecorder, ids: Sequence[UUID]) -> int:
    datastore = recorder.datastore
    statement = SQL("DELETE FROM {schema}.{table} WHERE originator_id = ANY(%s)").format(
        schema=Identifier(datastore.schema), table=Identifier(recorder.events_table_name)
    )
    values: list[Any] = list(ids) if datastore.originator_id_type == "uuid" else [str(c) for c in ids]
    with datastore.transaction(commit=True) as cursor:
        cursor.execute(statement, (values,))
        return max(cursor.rowcount, 0)


def _memory(recorder: POPOAggregateRecorder, ids: Sequence[UUID]) -> int:
    wanted = {str(c) for c in ids}
    with recorder._database_lock:
        kept = [e for e in recorder._stored_events if str(e.originator_id) not in wanted]
        deleted = len(recorder._stored_events) - len(kept)
        if deleted:
            recorder._stored_events[:] = kept
            recorder._stored_events_index.clear()
            for index, event in enumerate(kept):
                recorder._stored_events_index[str(event.originator_id)][event.originator_version] = index
    return deleted
