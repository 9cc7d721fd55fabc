"""The ``summaries`` view on ``cl_summaries``."""

from __future__ import annotations

from dataclasses import fields
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, and_, insert, or_, select, update

from contextledger.application.shared.results import SummaryInfo
from contextledger.domain.values.errors import ConversationErasedError
from contextledger.infrastructure.readmodels.view import SQLView, columns_of

__all__ = ["SQLSummariesView"]


class SQLSummariesView(SQLView):
    """``cl_summaries``: every summary with its range, provenance and validity (a
    provider's compaction with its ``native`` format and ``payload``); a fork holds a
    copy of the rows of its shared history (``origin_id``: the log that holds each), as
    ``fork_transcript`` copies the transcript."""

    name = "summaries"
    table_names = ("summaries",)
    sealed_column = "text"

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None:
        values = columns_of(summary)
        del values["inherited_from"]  # the row's log is origin_id: its own
        try:
            # Under the inherited subjects' keys too when its window reaches back into them.
            values["text"] = self._seal(conversation_id, summary.text, covers_from=summary.covers_from)
            values["invalidated_reason"] = self._seal(conversation_id, summary.invalidated_reason)
            if values["payload"] is not None:  # a provider's compaction: its items, as they came
                values["payload"] = self._seal(
                    conversation_id, list(values["payload"]), json_value=True, covers_from=summary.covers_from
                )
        except ConversationErasedError:  # erased since: nothing of it is written
            self.insert_tracking(tracking)
            return
        self._insert(tracking, {"conversation_id": conversation_id, "origin_id": conversation_id, **values})

    def invalidate_summaries(
        self,
        conversation_id: UUID,
        versions: tuple[int, ...],
        *,
        version: int,
        reason: str,
        tracking: Tracking,
        inherited: tuple[tuple[UUID, int], ...] = (),
    ) -> None:
        t = self.table
        keys = [(conversation_id, v) for v in versions] + list(inherited)
        try:
            sealed_reason = self._seal(conversation_id, reason)
        except ConversationErasedError:  # erased since: nothing of it is written
            self.insert_tracking(tracking)
            return

        def change(conn: Connection) -> None:
            if keys:
                conn.execute(
                    update(t)
                    .where(
                        t.c.conversation_id == conversation_id,
                        t.c.valid,
                        or_(*(and_(t.c.origin_id == o, t.c.version == v) for o, v in keys)),
                    )
                    .values(
                        valid=False,
                        invalidated_version=version,
                        invalidated_reason=sealed_reason,
                        invalidated_in=conversation_id,
                    )
                )

        self._write(tracking, change)

    def readable_summary(
        self,
        conversation_id: UUID,
        *,
        origin_id: UUID,
        version: int,
        text: str,
        tokens: int,
        tracking: Tracking,
    ) -> None:
        t = self.table
        try:  # a fork's copy of an inherited summary: under the inherited subjects' keys too
            sealed = self._seal(conversation_id, text, inherited=origin_id != conversation_id)
        except ConversationErasedError:  # erased since: nothing of it is written
            self.insert_tracking(tracking)
            return

        def change(conn: Connection) -> None:
            conn.execute(
                update(t)
                .where(
                    t.c.conversation_id == conversation_id, t.c.origin_id == origin_id, t.c.version == version
                )
                .values(text=sealed, tokens=tokens)
            )

        self._write(tracking, change)

    def fork_summaries(
        self, conversation_id: UUID, *, source_id: UUID, source_version: int, tracking: Tracking
    ) -> None:
        t = self.table
        query = select(t).where(
            t.c.conversation_id == source_id,
            or_(t.c.origin_id != source_id, t.c.version <= source_version),
        )

        def change(conn: Connection) -> None:
            copied: list[dict[str, Any]] = []
            for source_row in conn.execute(query):
                row = dict(source_row._mapping)
                row["conversation_id"] = conversation_id
                if row["invalidated_in"] == source_id and row["invalidated_version"] > source_version:
                    row.update(
                        valid=True, invalidated_version=None, invalidated_reason=None, invalidated_in=None
                    )
                if row["text"] is None:  # a subject it holds was erased: nothing to copy
                    continue
                copied.append(row)
            try:
                for row in copied:  # the fork's copy: under its own key and every inherited one
                    for name in ("text", "invalidated_reason"):
                        row[name] = self._seal(conversation_id, row[name], inherited=True)
                    if row.get("payload") is not None:
                        row["payload"] = self._seal(
                            conversation_id, row["payload"], json_value=True, inherited=True
                        )
            except ConversationErasedError:  # erased since: nothing of it is written
                return
            if copied:
                conn.execute(insert(t), copied)

        self._write(tracking, change)

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]:
        """As ``Ledger.summaries()`` gives them: a fork's inherited rows first, then its
        own, each in the order they were made."""
        t = self.table
        rows = self._select(
            select(t)
            .where(t.c.conversation_id == conversation_id)
            .order_by(t.c.origin_id == conversation_id, t.c.timestamp, t.c.version)
        )
        names = [f.name for f in fields(SummaryInfo) if f.name not in ("inherited_from", "payload")]
        return [
            SummaryInfo(
                **{n: row._mapping[n] for n in names},
                payload=None if row.payload is None else tuple(row.payload),
                inherited_from=row.origin_id if row.origin_id != conversation_id else None,
            )
            for row in rows
        ]
