"""The ``summaries`` view on ``cl_summaries``."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, select, update

from contextledger.application.results import SummaryInfo
from contextledger.infrastructure.readmodels.view import SQLView, columns_of

__all__ = ["SQLSummariesView"]


class SQLSummariesView(SQLView):
    """``cl_summaries``: every summary with its range, provenance and validity."""

    name = "summaries"
    table_names = ("summaries",)

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None:
        self._insert(tracking, {"conversation_id": conversation_id, **columns_of(summary)})

    def invalidate_summaries(
        self,
        conversation_id: UUID,
        versions: tuple[int, ...],
        *,
        version: int,
        reason: str,
        tracking: Tracking,
    ) -> None:
        t = self.table

        def change(conn: Connection) -> None:
            if versions:
                conn.execute(
                    update(t)
                    .where(t.c.conversation_id == conversation_id, t.c.version.in_(versions), t.c.valid)
                    .values(valid=False, invalidated_version=version, invalidated_reason=reason)
                )

        self._write(tracking, change)

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        t = self.table
        return self._records(
            SummaryInfo, select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.version)
        )
