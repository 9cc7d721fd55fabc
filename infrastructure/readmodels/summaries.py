"""The ``summaries`` view on ``cl_summaries``."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import select

from contextledger.application.results import SummaryInfo
from contextledger.infrastructure.readmodels.view import SQLView, columns_of

__all__ = ["SQLSummariesView"]


class SQLSummariesView(SQLView):
    """``cl_summaries``: every summary with its range and provenance."""

    name = "summaries"
    table_names = ("summaries",)

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None:
        self._insert(tracking, {"conversation_id": conversation_id, **columns_of(summary)})

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        t = self.table
        return self._records(
            SummaryInfo, select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.version)
        )
