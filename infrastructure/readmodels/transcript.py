"""The ``transcript`` view on ``cl_transcript``."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, Table, func, insert, select

from contextledger.application.results import TranscriptEntry
from contextledger.infrastructure.readmodels.view import SQLView, columns_of

__all__ = ["SQLTranscriptView"]


class SQLTranscriptView(SQLView):
    """``cl_transcript``: every message ever appended."""

    name = "transcript"
    table_names = ("transcript",)

    def add_message(
        self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking
    ) -> None:
        table = self.table

        def change(conn: Connection) -> None:
            self._insert_message(conn, table, entry, conversation_id)

        self._write(tracking, change)

    def _insert_message(
        self, conn: Connection, table: Table, entry: TranscriptEntry, conversation_id: UUID
    ) -> None:
        conn.execute(
            insert(table).values(
                conversation_id=conversation_id, role=entry.message["role"], **columns_of(entry)
            )
        )

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        t = self.table
        return self._records(
            TranscriptEntry,
            select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.position),
        )

    def count(self) -> int:
        """Messages held for all conversations."""
        return int(self._select(select(func.count()).select_from(self.table))[0][0])
