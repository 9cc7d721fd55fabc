"""Running sums over a conversation's window, carried on from append to append.

Folding an append must not pass over every unsummarized message: what the view costs,
which tool results are still shown in full and what the tail costs are sums kept by
name in the state's private ``_sums`` and carried on while only appends come (the
same window list). Any other change replaces the window list (or, for an edit, clears
the sums), and the next read sums afresh.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from contextledger.domain.folding.state import ConversationState
from contextledger.domain.values.reduction import Entry

__all__ = [
    "carried",
    "carry",
    "entries_cost",
    "full_tool_results",
    "tail_tokens",
    "visible_sum",
    "window_sums",
]


def entries_cost(entries: list[Entry], from_position: int, placeholder_before: int) -> int:
    """What ``entries`` from ``from_position`` on cost as messages, tool results before
    ``placeholder_before`` as placeholders (is_placeholder inlined: this runs for
    every append)."""
    total = 0
    for entry in entries:
        if entry.position < from_position:
            continue
        placeholder = entry.placeholder_tokens
        if (
            placeholder is not None
            and (entry.position < placeholder_before or entry.hidden)
            and entry.message.role == "tool"
        ):
            total += placeholder
        else:
            total += entry.tokens
    return total


def carried(
    s: ConversationState,
    name: str,
    key: Any,
    begin: int,
    end: int,
    add: Callable[[Any, list[Entry]], Any],
    empty: Any,
) -> Any:
    """The running sum ``name``: ``add(sum, entries)`` over the window's entries from
    ``begin`` to ``end``, starting from ``empty``; carried on from its last value when
    only appends came since (the same window list and ``key``, an end no earlier)."""
    window = s.window
    cached = window_sums(s).get(name)
    value = empty
    if cached is not None and cached[0] is window and cached[1] == key and cached[2] <= end:
        begin, value = cached[2], cached[3]
    if begin < end:
        value = add(value, window[begin:end])
    carry(s, name, key, end, value)
    return value


def window_sums(s: ConversationState) -> dict[str, tuple[list[Entry], Any, int, Any]]:
    """``s._sums``, read from pydantic's dict of private attributes: reading a private
    attribute by name goes through ``BaseModel.__getattr__`` (1.7 against 0.05 µs),
    and an append reads it four times."""
    private = s.__pydantic_private__
    sums: dict[str, tuple[list[Entry], Any, int, Any]] = private["_sums"] if private is not None else s._sums
    return sums


def carry(s: ConversationState, name: str, key: Any, end: int, value: Any) -> None:
    """Record the running sum ``name`` as ``value`` over the window up to ``end``."""
    window_sums(s)[name] = (s.window, key, end, value)


def visible_sum(s: ConversationState, end: int) -> int:
    """What the window's first ``end`` entries from ``dropped_before`` on cost in the
    prompt (``view_tokens`` less the fixed part)."""
    dropped, before = s.dropped_before, s.placeholder_before
    total: int = carried(
        s, "view", (dropped, before), 0, end, lambda v, es: v + entries_cost(es, dropped, before), 0
    )
    return total


def full_tool_results(s: ConversationState, end: int) -> list[int]:
    """Positions of the tool results among the window's first ``end`` entries still
    shown in full (at or after ``placeholder_before``, and with a placeholder to
    stand for them), oldest first."""
    before = s.placeholder_before

    def add(positions: list[int], entries: list[Entry]) -> list[int]:
        return positions + [
            e.position
            for e in entries
            if e.message.role == "tool"
            and e.position >= before
            and e.placeholder_tokens is not None
            and not e.hidden
        ]

    positions: list[int] = carried(s, "full", before, 0, end, add, [])
    return positions


def tail_tokens(s: ConversationState, start: int) -> int:
    """The tokens of the window's entries from index ``start`` on (the unsummarized
    messages after every summary)."""
    total: int = carried(
        s, "tail", start, start, len(s.window), lambda v, es: v + sum(e.tokens for e in es), 0
    )
    return total
