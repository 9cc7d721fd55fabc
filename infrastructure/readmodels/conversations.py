"""The ``conversations`` view on ``cl_conversations``."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, select

from contextledger.application.projections import ConversationRecord
from contextledger.domain.values.errors import ConversationErasedError
from contextledger.infrastructure.readmodels.view import SQLView

__all__ = ["SQLConversationsView"]


class SQLConversationsView(SQLView):
    """``cl_conversations``: the list of conversations (forks included)."""

    name = "conversations"
    table_names = ("conversations",)
    sealed_column = "key"

    def add_conversation(
        self,
        conversation_id: UUID,
        *,
        model: str,
        started_at: datetime,
        tracking: Tracking,
        key: str | None = None,
        messages: int = 0,
        forked_from: UUID | None = None,
        forked_at_version: int | None = None,
        policy_version: int = 1,
        summaries: int = 0,
    ) -> None:
        try:
            sealed_key = self._seal(conversation_id, key)
        except ConversationErasedError:  # erased since: nothing of it is written
            self.insert_tracking(tracking)
            return
        row = {
            "conversation_id": conversation_id,
            "model": model,
            "started_at": started_at,
            "updated_at": started_at,
            "last_version": 1,
            "messages": messages,
            "summaries": summaries,
            "policy_version": policy_version,
            "key": sealed_key,
            "key_lookup": self._lookup(key),
            "forked_from": forked_from,
            "forked_at_version": forked_at_version,
            "system_prompt_version": None,
        }
        self._insert(tracking, row)

    def update_conversation(
        self,
        conversation_id: UUID,
        *,
        version: int,
        at: datetime,
        tracking: Tracking,
        messages: int = 0,
        summaries: int = 0,
        policy_version: int | None = None,
        system_prompt_version: int | None = None,
    ) -> None:
        given: dict[str, Any] = {"last_version": version, "updated_at": at}
        added: dict[str, int] = {}
        if messages:
            added["messages"] = messages
        if summaries:
            added["summaries"] = summaries
        if policy_version is not None:
            given["policy_version"] = policy_version
        if system_prompt_version is not None:
            given["system_prompt_version"] = system_prompt_version
        if self._merge_in_batch(tracking, conversation_id, sets=given, adds=added):
            return

        def change(conn: Connection) -> None:
            self._update_row(conn, conversation_id, sets=given, adds=added)

        self._write(tracking, change, deferrable=True)

    def by_key(self, key: str) -> ConversationRecord | None:
        """The conversation the application calls ``key`` (its key is sealed under a
        cipher key: found by its lookup digest), None if there is none."""
        t = self.table
        lookup = self._lookup(key)
        where = t.c.key == key if lookup is None else t.c.key_lookup == lookup
        found = self._records(ConversationRecord, select(t).where(where))
        return found[0] if found else None

    def head_version(self, conversation_id: UUID) -> int | None:
        """The last version of the conversation this view applied (``HeadRecords``:
        what ``verify`` checks the log's end against); None if it has no row."""
        t = self.table
        rows = self._select(select(t.c.last_version).where(t.c.conversation_id == conversation_id))
        return int(rows[0][0]) if rows else None

    def conversations(self) -> list[ConversationRecord]:
        t = self.table
        return self._records(ConversationRecord, select(t).order_by(t.c.started_at, t.c.conversation_id))
