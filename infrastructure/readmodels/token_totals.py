"""The ``token_totals`` view on ``cl_token_totals``."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import Tracking
from sqlalchemy import Connection, func, insert, select, update

from contextledger.application.projections import TokenTotalsRecord
from contextledger.domain.values.errors import ConversationErasedError
from contextledger.infrastructure.readmodels.storage import COUNTERS
from contextledger.infrastructure.readmodels.view import SQLView

__all__ = ["SQLTokenTotalsView"]

#: Counters a global sum reduces by what forks inherited (each stored message once).
_SHARED = {
    "messages": "inherited_messages",
    "appended_tokens": "inherited_tokens",
    "retracted_messages": "inherited_retracted",
    "edited_messages": "inherited_edited",
    "summaries": "inherited_summaries",
}
#: Columns kept for the arithmetic, not shown in a record.
_INTERNAL = ("live_tokens_delta", *_SHARED.values())
#: The counters a ``TokenTotalsRecord`` shows.
_SHOWN = tuple(name for name in COUNTERS if name not in _INTERNAL)
#: The counters ``add_to_totals`` takes (checked per event: built once).
_COUNTER_NAMES = frozenset(COUNTERS)


def _new_row(conversation_id: UUID, *, base_tokens: int) -> dict[str, Any]:
    """A conversation's row with every counter at zero."""
    return {
        "conversation_id": conversation_id,
        "base_tokens": base_tokens,
        "system_tokens": 0,
        "tools_tokens": 0,
        "key": None,
        "key_lookup": None,
        **dict.fromkeys(COUNTERS, 0),
    }


class SQLTokenTotalsView(SQLView):
    """``cl_token_totals``: counters per conversation; ``global_totals()`` sums them."""

    name = "token_totals"
    table_names = ("token_totals",)
    sealed_column = "key"

    def start_totals(
        self,
        conversation_id: UUID,
        *,
        base_tokens: int,
        tracking: Tracking,
        system_tokens: int = 0,
        tools_tokens: int = 0,
        key: str | None = None,
        **counters: int,
    ) -> None:
        unknown = set(counters) - set(COUNTERS)
        if unknown:
            raise ValueError(f"unknown token counters: {sorted(unknown)}")
        row = _new_row(conversation_id, base_tokens=base_tokens)
        try:
            sealed_key = self._seal(conversation_id, key)
        except ConversationErasedError:  # erased since: nothing of it is written
            self.insert_tracking(tracking)
            return
        row.update(system_tokens=system_tokens, tools_tokens=tools_tokens, key=sealed_key, **counters)
        row["key_lookup"] = self._lookup(key)
        self._insert(tracking, row)

    def add_to_totals(self, conversation_id: UUID, *, tracking: Tracking, **increments: int) -> None:
        unknown = increments.keys() - _COUNTER_NAMES
        if unknown:
            raise ValueError(f"unknown token counters: {sorted(unknown)}")
        deltas = {k: int(v) for k, v in increments.items() if v}
        if self._merge_in_batch(tracking, conversation_id, adds=deltas):
            return
        table = self.table

        def missing(conn: Connection, adds: dict[str, int]) -> None:  # a row the log never started
            conn.execute(insert(table).values({**_new_row(conversation_id, base_tokens=0), **adds}))

        def change(conn: Connection) -> None:
            self._update_row(conn, conversation_id, adds=deltas, on_missing=missing)

        self._write(tracking, change, deferrable=True)

    def set_in_totals(
        self,
        conversation_id: UUID,
        *,
        tracking: Tracking,
        system_tokens: int | None = None,
        tools_tokens: int | None = None,
    ) -> None:
        table = self.table
        values: dict[Any, Any] = {}
        if system_tokens is not None:
            # base_tokens holds the system prompt's tokens: swap the old for the new.
            values[table.c.base_tokens] = table.c.base_tokens - table.c.system_tokens + system_tokens
            values[table.c.system_tokens] = system_tokens
        if tools_tokens is not None:
            values[table.c.tools_tokens] = tools_tokens

        def change(conn: Connection) -> None:
            if values:
                conn.execute(update(table).where(table.c.conversation_id == conversation_id).values(values))

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
            full_history_tokens=r.base_tokens + r.tools_tokens + r.appended_tokens + r.live_tokens_delta,
            tools_tokens=int(r.tools_tokens),
            key=r.key,
            **{name: int(getattr(r, name)) for name in _SHOWN},
        )

    def global_totals(self) -> TokenTotalsRecord:
        """Every conversation's counters summed; a fork's shared history counts once
        (``full_history_tokens`` sums each conversation's full prompt, forks' included)."""
        t = self.table
        summed = ("base_tokens", "tools_tokens", *COUNTERS)
        columns: list[Any] = [func.count()]
        columns += [func.coalesce(func.sum(t.c[name]), 0) for name in summed]
        row = self._select(select(*columns))[0]
        sums: dict[str, Any] = {name: int(row[i + 1]) for i, name in enumerate(summed)}
        full = sum(sums[n] for n in ("base_tokens", "tools_tokens", "appended_tokens", "live_tokens_delta"))
        for counter, inherited in _SHARED.items():
            sums[counter] -= sums[inherited]
        return TokenTotalsRecord(
            conversation_id=None,
            conversations=int(row[0]),
            full_history_tokens=full,
            tools_tokens=sums["tools_tokens"],
            **{name: sums[name] for name in _SHOWN},
        )
