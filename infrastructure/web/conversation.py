"""The conversation page's data, a page of its timeline at a time.

A conversation may hold tens of thousands of events; its page must stay small and
quick. What every page of one conversation shares -- the integrity check over the
whole log, the totals, the per-turn chart, the summaries, the edit marks -- is
computed once per version of the conversation and kept (a few conversations, least
recently used first out); each request then reads only its page of events. The
chart is drawn from at most ``CHART_POINTS`` turns (the first and the last among
them), the summaries table holds the newest ``SUMMARIES_SHOWN``, and the integrity
section names at most ``PROBLEMS_SHOWN`` altered events: the JSON says how many
there are in all.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import asdict, dataclass
from typing import Any, cast
from uuid import UUID

from contextledger.application.facade.ledger import Ledger
from contextledger.application.shared.results import AuditEvent, TokenTotals
from contextledger.application.storage.store import ConversationStore
from contextledger.application.summaries.history import event_marks, summary_infos
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import ConversationEvent, MessageAppended, SummaryCreated
from contextledger.domain.values.errors import LogDamagedError
from contextledger.infrastructure.web.paging import Paging, sample
from contextledger.infrastructure.web.views import ConversationRow, _timeline_entry, events_between

__all__ = [
    "CHART_POINTS",
    "EVENTS_PER_PAGE",
    "MAX_EVENTS_PER_PAGE",
    "PROBLEMS_SHOWN",
    "SUMMARIES_SHOWN",
    "ConversationPages",
]

#: Timeline events on one page unless ``?per_page=`` says otherwise, and the most it may say.
EVENTS_PER_PAGE = 250
MAX_EVENTS_PER_PAGE = 1000
#: Turns (and summary marks) the chart is drawn from at most.
CHART_POINTS = 120
#: Summaries listed (the newest), altered events named, at most.
SUMMARIES_SHOWN = 50
PROBLEMS_SHOWN = 50


def _turns(
    events: list[Any], limit: int = CHART_POINTS
) -> tuple[list[dict[str, Any]], int, list[dict[str, Any]]]:
    """Per model turn (each assistant message), a sample of at most ``limit``: what the
    model was sent to produce it and what sending the full history would have cost;
    the number of turns in all; and where summaries landed."""
    total = sum(
        1 for event in events[1:] if isinstance(event, MessageAppended) and event.message.role == "assistant"
    )
    wanted = sample(total, limit)
    turns: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []
    conversation: Conversation | None = None
    turn = 0
    for event in events:
        if not isinstance(event, ConversationEvent):
            continue
        if (
            conversation is not None
            and isinstance(event, MessageAppended)
            and event.message.role == "assistant"
        ):
            turn += 1
            if turn - 1 in wanted:
                # The context's cost is O(window): computed for the sampled turns only.
                turns.append(
                    {
                        "turn": turn,
                        "version": conversation.version,
                        "position": event.position,
                        "sent_tokens": conversation.context_tokens(),
                        "full_history_tokens": conversation.full_history_tokens,
                    }
                )
        try:
            conversation = Conversation.apply(conversation, event)
        except (ValueError, LogDamagedError):
            break  # a broken log: verify says where; the chart stops there
        if isinstance(event, SummaryCreated):
            marks.append(
                {
                    "after_turn": turn,
                    "version": event.originator_version,
                    "from_position": event.from_position,
                    "through_position": event.through_position,
                }
            )
    return turns, total, marks


class _ReadOnce:
    """A conversation store whose ``events`` reads each conversation's log once."""

    def __init__(self, store: ConversationStore) -> None:
        self._store = store
        self._events: dict[UUID, list[Any]] = {}

    def events(self, conversation_id: UUID) -> list[Any]:
        found = self._events.get(conversation_id)
        if found is None:
            found = self._events[conversation_id] = self._store.events(conversation_id)
        return found

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


@dataclass(frozen=True)
class _Shared:
    """What every page of one version of a conversation shows."""

    version: int
    head: dict[str, Any]
    #: By version, what the integrity check found wrong with that event.
    problems: dict[int, list[str]]
    marks: dict[int, dict[str, Any]]


class ConversationPages:
    """The conversation page, a page of the timeline at a time (see the module)."""

    def __init__(self, ledger: Ledger, *, keep: int = 8) -> None:
        self.ledger = ledger
        self.keep = keep
        self._shared: OrderedDict[UUID, _Shared] = OrderedDict()
        self._lock = threading.Lock()
        self._locks: dict[UUID, threading.Lock] = {}

    def page(self, cid: UUID, page: int, per_page: int, *, suffix: str = "") -> dict[str, Any]:
        """The conversation's page: what every page shows, and page ``page`` of its
        timeline (``per_page`` events, oldest first; links to the neighbouring pages
        end in ``suffix``: ``.json`` for the JSON's)."""
        shared = self._get(cid)
        paging = Paging(page, per_page, shared.version)
        stored = events_between(self.ledger, cid, paging.start, paging.stop)
        events = [_timeline_entry(AuditEvent.from_event(e), shared.marks) for e in stored]
        for entry in events:
            entry["problems"] = shared.problems.get(entry["version"], [])
        return {
            **shared.head,
            "timeline": paging.record(f"/conversations/{cid}{suffix}", EVENTS_PER_PAGE),
            "events": events,
        }

    def _get(self, cid: UUID) -> _Shared:
        version = self.ledger.store.read(cid, lambda conversation: conversation.version)
        with self._lock:
            found = self._shared.get(cid)
            if found is not None and found.version == version:
                self._shared.move_to_end(cid)
                return found
            lock = self._locks.setdefault(cid, threading.Lock())
        with lock:  # one computation per conversation at a time; the others reuse it
            with self._lock:
                found = self._shared.get(cid)
            if found is None or found.version < version:
                found = self._compute(cid)
            with self._lock:
                self._shared[cid] = found
                self._shared.move_to_end(cid)
                while len(self._shared) > self.keep:
                    gone, _ = self._shared.popitem(last=False)
                    self._locks.pop(gone, None)
            return found

    def _compute(self, cid: UUID) -> _Shared:
        ledger = self.ledger
        # One read of the log serves the integrity check, the summaries and the marks.
        store = cast(ConversationStore, _ReadOnce(ledger.store))
        events = store.events(cid)

        def head(conversation: Conversation) -> tuple[int, dict[str, Any], dict[str, Any], Any]:
            row = ConversationRow.of(conversation).record()
            return conversation.version, row, vars(TokenTotals.of(conversation)), conversation.state.fork_of

        # Read in place (no copy of a long window); the head describes the events read
        # here, even if more arrived meanwhile.
        version, row, totals, origin = ledger.store.read(cid, head)
        # The version of the last event read (a fork's remainder: its own events begin
        # after version 1, and may be none).
        seen = events[-1].originator_version if events else version
        if version != seen:
            version, row, totals, origin = head(ledger.conversation(cid, version=seen))
        report = ledger.verify(cid)
        position_at = {e.originator_version: e.position for e in events if isinstance(e, MessageAppended)}
        problems = [
            {"version": p.version, "position": position_at.get(p.version), "problem": p.problem}
            for p in report.problems
        ]
        turns, turns_total, marks = _turns(events)
        shown_marks = [marks[i] for i in sorted(sample(len(marks), CHART_POINTS))]
        summaries = [asdict(s) for s in summary_infos(store, cid)]
        shared: dict[str, Any] = {
            "conversation": row,
            "fork_of": None
            if origin is None
            else {
                "conversation_id": str(origin.conversation_id),
                "version": origin.version,
                "through_position": origin.through_position,
            },
            "totals": totals,
            "integrity": {
                "verified": report.ok,
                "events": report.events,
                "messages": report.messages,
                "summaries": report.summaries,
                "first_problem": problems[0] if problems else None,
                "problems": problems[:PROBLEMS_SHOWN],
                "problems_total": len(problems),
            },
            "summaries": summaries[-SUMMARIES_SHOWN:],
            "summaries_total": len(summaries),
            "turns": turns,
            "turns_total": turns_total,
            "summary_marks": shown_marks,
            "summary_marks_total": len(marks),
        }
        by_version: dict[int, list[str]] = {}
        for p in report.problems:
            by_version.setdefault(p.version, []).append(p.problem)
        return _Shared(
            version=seen,
            head=shared,
            problems=by_version,
            marks=event_marks(store, cid),
        )
