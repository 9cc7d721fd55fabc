"""A conversation's events read on PostgreSQL with its subject's key row, in one statement.

A process that loads a conversation it has not read yet (a cold load) decrypts its
records under the key they name, read from the key table: one more query per
conversation. With the key table in the event store's own database, the PostgreSQL
recorder reads a whole conversation (``select_events`` from its start) with the key
row of its subject in the same statement (``KeyedRead``): the subject the
conversation names (``<prefix>_conversation_subjects``), or its own id; the row rides
on the first event's row. The row is handed to the key cache (``KeyFence.learn``),
so the records that name it decrypt without a query of their own. A record naming
another key (a fork's, a moved conversation's) is read as before, by its id.

Nothing is trusted from the row that a key read by its id would not be: the cache
unwraps it the same way (a tombstone is cached as a tombstone), and a row under
another master key is left alone (the read by id then says why it cannot be used).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Composed, Identifier

from contextledger.infrastructure.keys.key_fence import KeyFence
from contextledger.infrastructure.keys.key_tables import KeyRow

__all__ = ["KeyedRead"]


class KeyedRead:
    """The full read of a conversation with its subject's key row (see the module doc)."""

    def __init__(self, schema: str, events_table: str, fence: KeyFence) -> None:
        self.fence = fence
        self.statement: Composed = SQL(
            "WITH k AS MATERIALIZED (SELECT key_id, subject, wrapped_key, master_id, created_at, "
            "erased_at, erase_reason FROM {keys} WHERE subject = COALESCE("
            "(SELECT subject FROM {subjects} WHERE conversation_id = %(o)s), %(own)s)) "
            "SELECT e.originator_id, e.originator_version, e.topic, e.state, k.key_id, k.subject, "
            "k.wrapped_key, k.master_id, k.created_at, k.erased_at, k.erase_reason "
            "FROM {schema}.{table} e LEFT JOIN k ON e.originator_version = 1 "
            "WHERE e.originator_id = %(o)s ORDER BY e.originator_version ASC"
        ).format(
            keys=SQL(fence.table),
            subjects=SQL(fence.subjects),
            schema=Identifier(schema),
            table=Identifier(events_table),
        )

    def read(self, conn: psycopg.Connection[Any], originator_id: UUID | str) -> Sequence[StoredEvent]:
        """The conversation's events in version order; its subject's key row learnt."""
        oid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
        with conn.cursor() as curs:
            curs.execute(self.statement, {"o": oid, "own": str(oid)}, prepare=True)
            rows = curs.fetchall()
        if rows and rows[0]["key_id"] is not None and self.fence.learn is not None:
            first = rows[0]
            wrapped = first["wrapped_key"]
            self.fence.learn(
                KeyRow(
                    key_id=bytes(first["key_id"]),
                    subject=first["subject"],
                    wrapped_key=None if wrapped is None else bytes(wrapped),
                    master_id=first["master_id"],
                    created_at=first["created_at"],
                    erased_at=first["erased_at"],
                    erase_reason=first["erase_reason"],
                )
            )
        return [
            StoredEvent(
                originator_id=row["originator_id"],
                originator_version=row["originator_version"],
                topic=row["topic"],
                state=bytes(row["state"]),
            )
            for row in rows
        ]
