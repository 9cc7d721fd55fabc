"""The ``transcript`` view on ``cl_transcript``."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, Table, and_, func, insert, or_, select, update

from contextledger.application.shared.results import TranscriptEntry, TranscriptVersion
from contextledger.application.summaries.history import transcript_order
from contextledger.domain.values.errors import ConversationErasedError
from contextledger.infrastructure.readmodels.view import SQLView, columns_of

__all__ = ["SQLTranscriptView"]

#: The entry's fields besides the marks (``TranscriptEntry``'s own).
_ENTRY_FIELDS = ("position", "version", "tokens", "message", "timestamp", "digest", "client_message_id")


class SQLTranscriptView(SQLView):
    """``cl_transcript``: every message ever appended and every edited version.

    Rows are keyed by conversation, position, version and ``origin_id`` (the
    conversation whose log holds the message: a fork's shared rows name their source).
    Edits add a row and mark the replaced one (``superseded_by_version``); retractions
    mark every row at their positions (version, reason); ``retracted_in`` and
    ``superseded_in`` name the conversation that made the mark, so a fork made at a
    past version copies the marks that stood then and no later ones.
    """

    name = "transcript"
    table_names = ("transcript",)
    sealed_column = "message"

    def add_message(self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking) -> None:
        table = self.table
        batch = self._batched(tracking)
        if batch is not None:  # in a batch: the row goes with its other rows
            if tracking.notification_id > batch.tracked:
                self._insert_message(batch.conn, table, entry, conversation_id)
                batch.tracked = tracking.notification_id
            return

        def change(conn: Connection) -> None:
            self._insert_message(conn, table, entry, conversation_id)

        self._write(tracking, change, deferrable=True)

    def edit_message(self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking) -> None:
        t = self.table

        def change(conn: Connection) -> None:
            try:
                row = self._message_row(entry, conversation_id)
            except ConversationErasedError:  # erased since: nothing of it is written
                return
            conn.execute(
                update(t)
                .where(
                    t.c.conversation_id == conversation_id,
                    t.c.position == entry.position,
                    t.c.superseded_by_version.is_(None),
                )
                .values(superseded_by_version=entry.version, superseded_in=conversation_id)
            )
            self._add_row(conn, t, row)

        self._write(tracking, change)

    def retract_messages(
        self,
        conversation_id: UUID,
        positions: tuple[int, ...],
        *,
        version: int,
        reason: str | None,
        tracking: Tracking,
    ) -> None:
        t = self.table
        try:
            sealed_reason = self._seal(conversation_id, reason)
        except ConversationErasedError:  # erased since: nothing of it is written
            self.insert_tracking(tracking)
            return

        def change(conn: Connection) -> None:
            conn.execute(
                update(t)
                .where(t.c.conversation_id == conversation_id, t.c.position.in_(positions))
                .values(
                    retracted=True,
                    retracted_version=version,
                    retracted_reason=sealed_reason,
                    retracted_in=conversation_id,
                )
            )

        self._write(tracking, change)

    def fork_transcript(
        self,
        conversation_id: UUID,
        *,
        source_id: UUID,
        source_version: int,
        through_position: int,
        tracking: Tracking,
    ) -> None:
        t = self.table
        query = select(t).where(
            t.c.conversation_id == source_id,
            t.c.position <= through_position,
            or_(t.c.origin_id != source_id, t.c.version <= source_version),
        )

        def change(conn: Connection) -> None:
            copied: list[dict[str, Any]] = []
            for source_row in conn.execute(query):
                row = dict(source_row._mapping)
                row["conversation_id"] = conversation_id
                if row["retracted_in"] == source_id and row["retracted_version"] > source_version:
                    row.update(
                        retracted=False, retracted_version=None, retracted_reason=None, retracted_in=None
                    )
                if row["superseded_in"] == source_id and row["superseded_by_version"] > source_version:
                    row.update(superseded_by_version=None, superseded_in=None)
                if row["message"] is None:  # a subject it holds was erased: nothing to copy
                    continue
                copied.append(row)
            try:
                for row in copied:  # the fork's copy: under its own key and every inherited one
                    row["message"] = self._seal(
                        conversation_id, row["message"], json_value=True, inherited=True
                    )
                    for name in ("client_message_id", "retracted_reason"):
                        row[name] = self._seal(conversation_id, row[name], inherited=True)
            except ConversationErasedError:  # erased since: nothing of it is written
                return
            if copied:
                conn.execute(insert(t), copied)

        self._write(tracking, change)

    def _insert_message(
        self, conn: Connection, table: Table, entry: TranscriptEntry, conversation_id: UUID
    ) -> None:
        """Add the row of a message the conversation appended (nothing if its subject
        was erased since)."""
        try:
            row = self._message_row(entry, conversation_id)
        except ConversationErasedError:
            return
        self._add_row(conn, table, row)

    def _message_row(self, entry: TranscriptEntry, conversation_id: UUID) -> dict[str, Any]:
        """The row of a message the conversation appended or edited, its content sealed
        under its subject's key (``ConversationErasedError`` if that was erased)."""
        row = {
            "conversation_id": conversation_id,
            "origin_id": conversation_id,
            "role": entry.message["role"],
            "client_message_lookup": self._lookup(entry.client_message_id),
            "retracted": False,
            # The entry's fields (as ``columns_of`` gives them), read directly: this runs
            # for every message a rebuild applies.
            "position": entry.position,
            "version": entry.version,
            "tokens": entry.tokens,
            "message": self._seal(conversation_id, entry.message, json_value=True),
            "timestamp": entry.timestamp,
            "digest": entry.digest,
            "client_message_id": self._seal(conversation_id, entry.client_message_id),
        }
        if type(entry) is not TranscriptEntry:  # a version: its marks too
            row.update(
                (k, v)
                for k, v in columns_of(entry).items()
                if k not in ("inherited_from", "message", "client_message_id")
            )
            row["retracted_reason"] = self._seal(conversation_id, row.get("retracted_reason"))
        return row

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]:
        """As ``Ledger.transcript()`` gives it: by position, a fork's shared rows
        first, then by version; marked rows as ``TranscriptVersion``."""
        t = self.table
        rows = self._select(select(t).where(t.c.conversation_id == conversation_id))
        entries = [_entry(row._mapping, conversation_id) for row in rows]
        return sorted(entries, key=transcript_order)

    def count(self) -> int:
        """Message versions held for all conversations (a fork's shared rows included)."""
        return int(self._select(select(func.count()).select_from(self.table))[0][0])

    def retracted(self, conversation_id: UUID) -> list[tuple[int, int, str | None]]:
        """``(position, version, reason)`` of each retracted row of the conversation."""
        t = self.table
        rows = self._select(
            select(t.c.position, t.c.retracted_version, t.c.retracted_reason)
            .where(and_(t.c.conversation_id == conversation_id, t.c.retracted))
            .order_by(t.c.position, t.c.version)
        )
        return [(int(r[0]), int(r[1]), r[2]) for r in rows]


def _entry(row: Any, conversation_id: UUID) -> TranscriptEntry:
    base = {name: row[name] for name in _ENTRY_FIELDS}
    marks = {
        "retracted": bool(row["retracted"]),
        "retracted_version": row["retracted_version"],
        "retracted_reason": row["retracted_reason"],
        "edited_from_version": row["edited_from_version"],
        "superseded_by_version": row["superseded_by_version"],
        "inherited_from": row["origin_id"] if row["origin_id"] != conversation_id else None,
    }
    if not any(value not in (None, False) for value in marks.values()):
        return TranscriptEntry(**base)
    return TranscriptVersion(**base, **marks)
