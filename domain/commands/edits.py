"""Pure pieces of editing a conversation: the history port, the invalidation plan,
the digest records of edits and the fold of the log into current messages.

The aggregate keeps only the unsummarized window, so an edit that reaches into
summarized history asks a ``History`` (the application reads it from the log) for
the messages and summary texts it needs, and records them in its events: the fold
stays pure, and replaying the log re-derives every past version exactly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Protocol

from pydantic import BaseModel, ConfigDict

from contextledger.domain.events import (
    DomainEvent,
    Forked,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
)
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import Entry, SummaryLayer, SummaryLink

__all__ = [
    "History",
    "HistoryFold",
    "InvalidationPlan",
    "edit_record",
    "plan_invalidation",
    "retraction_record",
    "system_prompt_record",
]


class History(Protocol):
    """What an edit may need from the log beyond the aggregate's bounded state."""

    def entries(self, from_position: int, through_position: int) -> list[Entry]:
        """The newest stored version of each non-retracted message in the range."""
        ...

    def summary_text(self, link: SummaryLink) -> str:
        """The text of the recorded summary ``link`` names."""
        ...


class InvalidationPlan(BaseModel):
    """Which summaries an edit invalidates and what stands instead."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    #: Versions of the ``SummaryCreated`` events that no longer stand.
    invalidated_versions: tuple[int, ...]
    #: Summaries a fork inherited (stored in another log) that no longer stand in it.
    invalidated_inherited: tuple[SummaryLink, ...] = ()
    #: Layers the edit does not touch.
    kept: tuple[SummaryLayer, ...]
    #: Earlier summaries that become the newest valid ones, with the links before them.
    restored: tuple[tuple[SummaryLink, tuple[SummaryLink, ...]], ...]
    #: Position ranges whose messages come back into the window.
    reopened: tuple[tuple[int, int], ...]


def plan_invalidation(layers: Iterable[SummaryLayer], changed: set[int]) -> InvalidationPlan | None:
    """Invalidate every layer whose range holds a changed position.

    In single mode a layer's ``chain`` lists the earlier summaries it re-folded: the
    newest of them that ends before the first changed position stands again (every
    later one folded the change in and is invalidated too); without one, the whole
    range reopens. In layered mode only the touched layers go. None: nothing touched.
    """
    kept: list[SummaryLayer] = []
    restored: list[tuple[SummaryLink, tuple[SummaryLink, ...]]] = []
    reopened: list[tuple[int, int]] = []
    invalidated: list[SummaryLink] = []
    for layer in layers:
        touched = [p for p in changed if layer.from_position <= p <= layer.through_position]
        if not touched:
            kept.append(layer)
            continue
        low = min(touched)
        index = max((i for i, link in enumerate(layer.chain) if link.through_position < low), default=-1)
        if layer.link is not None:
            invalidated.append(layer.link)
        invalidated.extend(layer.chain[index + 1 :])
        if index >= 0:
            link = layer.chain[index]
            restored.append((link, layer.chain[:index]))
            reopened.append((link.through_position + 1, layer.through_position))
        else:
            reopened.append((layer.from_position, layer.through_position))
    if not reopened:
        return None
    return InvalidationPlan(
        invalidated_versions=tuple(sorted({link.version for link in invalidated if link.origin is None})),
        invalidated_inherited=tuple(
            sorted({link for link in invalidated if link.origin is not None}, key=_link_order)
        ),
        kept=tuple(kept),
        restored=tuple(restored),
        reopened=tuple(reopened),
    )


def _link_order(link: SummaryLink) -> tuple[str, int]:
    return str(link.origin), link.version


def retraction_record(command: str, positions: Iterable[int], reason: str | None) -> dict[str, Any]:
    """What a retraction's digest covers."""
    return {"kind": "retract", "command": command, "positions": list(positions), "reason": reason}


def edit_record(position: int, replaces_version: int, message: Message) -> dict[str, Any]:
    """What an edit's digest covers."""
    return {
        "kind": "edit",
        "position": position,
        "replaces_version": replaces_version,
        "message": message.canonical_json(),
    }


def system_prompt_record(system_prompt: str | None) -> dict[str, Any]:
    """What a system prompt change's digest covers."""
    return {"kind": "system_prompt", "system_prompt": system_prompt}


class HistoryFold:
    """The current messages of a conversation, folded from its events.

    ``base`` holds a fork's inherited messages (its source's at the fork version).
    ``entries`` maps position to the newest version of each non-retracted message;
    ``retracted`` maps each retracted position to the version that retracted it;
    ``replaced`` maps each replaced version to the version that replaced it.
    """

    def __init__(self, base: HistoryFold | None = None, *, through_position: int = -1) -> None:
        self.entries: dict[int, Entry] = {}
        self.retracted: dict[int, int] = {}
        self.replaced: dict[int, int] = {}
        self.next_position = 0
        #: The version of the last event folded.
        self.version = 0
        self._calls: dict[str, str] = {}
        if base is not None:
            self.entries = {p: e for p, e in base.entries.items() if p <= through_position}
            self.retracted = {p: v for p, v in base.retracted.items() if p <= through_position}
            self.next_position = through_position + 1

    def copy(self) -> HistoryFold:
        """A copy that folding more events into leaves this one as it is."""
        twin = HistoryFold()
        twin.entries = dict(self.entries)
        twin.retracted = dict(self.retracted)
        twin.replaced = dict(self.replaced)
        twin.next_position = self.next_position
        twin.version = self.version
        twin._calls = dict(self._calls)
        return twin

    def apply(self, event: DomainEvent) -> None:
        """Fold one event (others than messages and edits are ignored)."""
        self.version = event.originator_version
        if isinstance(event, MessageAppended):
            message = event.message
            tool_name = None
            if message.role == "tool":
                tool_name = self._calls.get(message.tool_call_id or "")
            else:
                self._calls = {c.id: c.function.name for c in message.tool_calls or ()}
            self.entries[event.position] = event.entry(tool_name)
            self.next_position = event.position + 1
        elif isinstance(event, MessageEdited):
            old = self.entries.get(event.position)
            if old is not None:
                self.replaced[old.version] = event.originator_version
            self.entries[event.position] = event.entry(old.tool_name if old is not None else None)
        elif isinstance(event, MessagesRetracted):
            for position in event.positions:
                self.entries.pop(position, None)
                self.retracted[position] = event.originator_version
        elif isinstance(event, Forked):
            self.next_position = event.origin.through_position + 1

    def range(self, from_position: int, through_position: int) -> list[Entry]:
        """Current entries in the range, oldest first."""
        return [self.entries[p] for p in range(from_position, through_position + 1) if p in self.entries]
