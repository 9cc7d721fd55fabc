"""The ``summaries`` view on ``cl_summaries``."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, insert, select

from contextledger.application.results import SummaryInfo
from contextledger.infrastructure.readmodels.view import SQLView

__all__ = ["SQLSummariesView"]


class SQLSummariesView(SQLView):
    """``cl_summaries``: every summary with its range and provenance."""

    name = "summaries"
    table_names = ("summaries",)

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None:
        table = self.models.tables["summaries"]

        def change(conn: Connection) -> None:
            conn.execute(
                insert(table).values(
                    conversation_id=conversation_id,
                    version=summary.version,
                    from_position=summary.from_position,
                    through_position=summary.through_position,
                    covers_from=summary.covers_from,
                    text=summary.text,
                    tokens=summary.tokens,
                    model=summary.model,
                    prompt_version=summary.prompt_version,
                    input_tokens=summary.input_tokens,
                    output_tokens=summary.output_tokens,
                    latency_ms=summary.latency_ms,
                    policy_version=summary.policy_version,
                    timestamp=summary.timestamp,
                    source_digest=summary.source_digest,
                )
            )

        self._write(tracking, change)

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        t = self.models.tables["summaries"]
        rows = self._select(
            select(t).where(t.c.conversation_id == conversation_id).order_by(t.c.version)
        )
        return [
            SummaryInfo(
                from_position=r.from_position,
                through_position=r.through_position,
                covers_from=r.covers_from,
                text=r.text,
                tokens=r.tokens,
                model=r.model,
                prompt_version=r.prompt_version,
                input_tokens=r.input_tokens,
                output_tokens=r.output_tokens,
                latency_ms=r.latency_ms,
                policy_version=r.policy_version,
                version=r.version,
                timestamp=r.timestamp,
                source_digest=r.source_digest,
            )
            for r in rows
        ]
