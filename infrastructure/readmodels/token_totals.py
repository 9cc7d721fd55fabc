"""The ``token_totals`` view on ``cl_token_totals``."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, func, insert, select, update

from contextledger.application.projections import TokenTotalsRecord
from contextledger.infrastructure.readmodels.storage import COUNTERS
from contextledger.infrastructure.readmodels.view import SQLView

__all__ = ["SQLTokenTotalsView"]


def _new_row(conversation_id: UUID, *, base_tokens: int) -> dict[str, Any]:
    """A conversation's row with every counter at zero."""
    return {"conversation_id": conversation_id, "base_tokens": base_tokens, **dict.fromkeys(COUNTERS, 0)}


class SQLTokenTotalsView(SQLView):
    """``cl_token_totals``: counters per conversation; ``global_totals()`` sums them."""

    name = "token_totals"
    table_names = ("token_totals",)

    def start_totals(self, conversation_id: UUID, *, base_tokens: int, tracking: Tracking) -> None:
        self._insert(tracking, _new_row(conversation_id, base_tokens=base_tokens))

    def add_to_totals(self, conversation_id: UUID, *, tracking: Tracking, **increments: int) -> None:
        unknown = set(increments) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown token counters: {sorted(unknown)}")
        table = self.table
        deltas = {k: int(v) for k, v in increments.items() if v}

        def change(conn: Connection) -> None:
            if not deltas:
                return
            result = conn.execute(
                update(table)
                .where(table.c.conversation_id == conversation_id)
                .values({table.c[k]: table.c[k] + v for k, v in deltas.items()})
            )
            if result.rowcount == 0:  # a row the log never started (defensive)
                conn.execute(insert(table).values({**_new_row(conversation_id, base_tokens=0), **deltas}))

        self._write(tracking, change)

    def totals(self, conversation_id: UUID) -> TokenTotalsRecord | None:
        t = self.table
        rows = self._select(select(t).where(t.c.conversation_id == conversation_id))
        if not rows:
            return None
        r = rows[0]
        return TokenTotalsRecord(
            conversation_id=r.conversation_id,
            conversations=1,
            full_history_tokens=r.base_tokens + r.appended_tokens,
            **{name: int(getattr(r, name)) for name in COUNTERS},
        )

    def global_totals(self) -> TokenTotalsRecord:
        t = self.table
        columns: list[Any] = [func.count()]
        columns.append(func.coalesce(func.sum(t.c.base_tokens), 0))
        columns += [func.coalesce(func.sum(t.c[name]), 0) for name in COUNTERS]
        row = self._select(select(*columns))[0]
        sums = {name: int(row[i + 2]) for i, name in enumerate(COUNTERS)}
        return TokenTotalsRecord(
            conversation_id=None,
            conversations=int(row[0]),
            full_history_tokens=int(row[1]) + sums["appended_tokens"],
            **sums,
        )
