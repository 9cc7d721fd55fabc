"""The ``transcript`` view on ``cl_transcript``."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, Table, func, insert, select

from contextledger.application.results import TranscriptEntry
from contextledger.infrastructure.readmodels.view import SQLView

__all__ = ["SQLTranscriptView"]


class SQLTranscriptView(SQLView):
    """``cl_transcript``: every message ever appended."""

    name = "transcript"
    table_names = ("transcript",)

    def add_message(
        self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking
    ) -> None:
        table = self.models.tables["transcript"]

        def change(conn: Connection) -> None:
            self._insert_message(conn, table, entry, conversation_id)

        self._write(tracking, change)

    def _insert_message(
        self, conn: Connection, table: Table, entry: TranscriptEntry, conversation_id: UUID
    ) -> None:
        conn.execute(
            insert(table).values(
                conversation_id=conversation_id,
                position=entry.position,
                version=entry.version,
                role=entry.message["role"],
                message=entry.message,
                tokens=entry.tokens,
                timestamp=entry.timestamp,
                digest=entry.digest,
                client_message_id=entry.client_message_id,
            )
        )

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        t = self.models.tables["transcript"]
        rows = self._select(
            select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.position)
        )
        return [
            TranscriptEntry(
                position=r.position,
                version=r.version,
                tokens=r.tokens,
                message=r.message,
                timestamp=r.timestamp,
                digest=r.digest,
                client_message_id=r.client_message_id,
            )
            for r in rows
        ]

    def count(self) -> int:
        """Messages held for all conversations."""
        t = self.models.tables["transcript"]
        return int(self._select(select(func.count()).select_from(t))[0][0])
