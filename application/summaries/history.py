"""The log as an edit's ``History``: messages and summary texts the bounded aggregate
state no longer holds, read from the stored events (a fork's shared prefix from its
source, at the fork's version)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import replace
from typing import Any
from uuid import UUID

from eventsourcing.utils import resolve_topic

from contextledger.application.shared.results import SharedHistory, SummaryInfo, TranscriptEntry
from contextledger.application.storage.store import ConversationStore, store_errors
from contextledger.domain.commands.edits import HistoryFold
from contextledger.domain.events import (
    Forked,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    NativeSummaryReadable,
    Started,
    SummaryCreated,
    SummaryInvalidated,
)
from contextledger.domain.values.errors import StoreError
from contextledger.domain.values.reduction import Entry, SummaryLink

__all__ = [
    "HistoryCache",
    "LogHistory",
    "event_marks",
    "fold_history",
    "shared_history",
    "summary_infos",
    "transcript_entries",
    "transcript_order",
]


class HistoryCache:
    """The newest history fold of recently edited conversations, so a conversation's
    log is read once per process and later edits fold only the events since."""

    def __init__(self, size: int = 256) -> None:
        self.size = size
        self._folds: OrderedDict[UUID, HistoryFold] = OrderedDict()
        self._lock = threading.Lock()

    def forget(self, conversation_id: UUID) -> None:
        """Drop the conversation's fold (its content was erased)."""
        with self._lock:
            self._folds.pop(conversation_id, None)

    def fold(
        self, store: ConversationStore, conversation_id: UUID, *, through_version: int | None = None
    ) -> HistoryFold:
        """A private copy of the conversation's fold as of ``through_version``."""
        with self._lock:
            cached = self._folds.get(conversation_id)
            if cached is not None and (through_version is None or cached.version <= through_version):
                with store_errors(conversation_id):
                    newer = store.app.events.get(conversation_id, gt=cached.version, lte=through_version)
                    for event in newer:
                        cached.apply(event)  # type: ignore[arg-type]
                fold = cached
            else:
                fold = fold_history(store, conversation_id, through_version=through_version, cache=self)
                if cached is not None and cached.version > fold.version:
                    return fold  # an audit of the past: keep the newer fold cached
            self._folds[conversation_id] = fold
            self._folds.move_to_end(conversation_id)
            while len(self._folds) > self.size:
                self._folds.popitem(last=False)
            return fold.copy()


def fold_history(
    store: ConversationStore,
    conversation_id: UUID,
    *,
    through_version: int | None = None,
    cache: HistoryCache | None = None,
) -> HistoryFold:
    """The conversation's current messages as of ``through_version`` (default: now);
    a fork's shared history comes from ``cache`` when given."""
    events = store.events(conversation_id)
    if through_version is not None:
        events = [e for e in events if e.originator_version <= through_version]
    first = events[0]
    if isinstance(first, Forked):
        source, version = first.origin.conversation_id, first.origin.version
        base = (
            _cached_base(cache, store, source, version)
            if cache is not None
            else fold_history(store, source, through_version=version)
        )
        fold = HistoryFold(base, through_position=first.origin.through_position)
    else:
        fold = HistoryFold()
    for event in events:
        fold.apply(event)
    return fold


def _cached_base(cache: HistoryCache, store: ConversationStore, source: UUID, version: int) -> HistoryFold:
    # Called under the cache's lock: look the source up without taking it again.
    cached = cache._folds.get(source)
    if cached is not None and cached.version == version:
        return cached
    fold = fold_history(store, source, through_version=version, cache=cache)
    if cached is None or cached.version < version:
        cache._folds[source] = fold
    return fold


class LogHistory:
    """A ``History`` over one conversation's stored log, read once, on first need."""

    def __init__(
        self,
        store: ConversationStore,
        conversation_id: UUID,
        *,
        through_version: int | None = None,
        cache: HistoryCache | None = None,
    ) -> None:
        self.store = store
        self.cache = cache
        self.conversation_id = conversation_id
        self.through_version = through_version
        self._fold: HistoryFold | None = None
        #: How many times the log was read (benchmarks report it).
        self.reads = 0

    def fold(self) -> HistoryFold:
        if self._fold is None:
            self.reads += 1
            if self.cache is not None:
                self._fold = self.cache.fold(
                    self.store, self.conversation_id, through_version=self.through_version
                )
            else:
                self._fold = fold_history(
                    self.store, self.conversation_id, through_version=self.through_version
                )
        return self._fold

    def entries(self, from_position: int, through_position: int) -> list[Entry]:
        """The newest stored version of each non-retracted message in the range."""
        return self.fold().range(from_position, through_position)

    def summary_text(self, link: SummaryLink) -> str:
        """The text of the recorded summary ``link`` names."""
        cid = link.origin or self.conversation_id
        with store_errors(cid):
            found = list(self.store.app.events.get(cid, gt=link.version - 1, lte=link.version))
        if not found or not isinstance(found[0], SummaryCreated):
            raise StoreError(
                "the log holds no summary at that version", conversation_id=cid, version=link.version
            )
        if found[0].text or found[0].native is None:
            return found[0].text
        # An opaque native summary whose readable text was made later: that text.
        for event in self.store.events(self.conversation_id):
            if isinstance(event, NativeSummaryReadable) and (event.summary_origin, event.summary_version) == (
                link.origin,
                link.version,
            ):
                return event.text
        return ""


def transcript_order(entry: TranscriptEntry) -> tuple[Any, ...]:
    """How a transcript is ordered: by position, a fork's inherited rows first, then by
    version; rows of one position and version inherited from different ancestors (a
    fork of a fork that edited it) by time, then digest, so that every reader of the
    same rows (the ledger, the transcript read model) lists them alike."""
    return (entry.position, entry.inherited_from is None, entry.version, entry.timestamp, entry.digest)


def transcript_entries(
    store: ConversationStore, conversation_id: UUID, *, through_version: int | None = None
) -> list[TranscriptEntry]:
    """Every appended message and every edited version, by position then version,
    with retractions and replacements marked (a fork's shared history first)."""
    events = store.events(conversation_id)
    if through_version is not None:
        events = [e for e in events if e.originator_version <= through_version]
    out: list[TranscriptEntry] = []
    # A fork's remainder may hold no event about its own part (``store.events``).
    first = events[0] if events else None
    if isinstance(first, Forked):
        origin = first.origin
        out = [
            e if e.inherited_from is not None else e.marked(inherited_from=origin.conversation_id)
            for e in transcript_entries(store, origin.conversation_id, through_version=origin.version)
            if e.position <= origin.through_position
        ]
    by_position: dict[int, list[int]] = {}
    for index, entry in enumerate(out):
        by_position.setdefault(entry.position, []).append(index)
    for event in events:
        if isinstance(event, (MessageAppended, MessageEdited)):
            if isinstance(event, MessageEdited):
                for index in by_position.get(event.position, []):
                    if out[index].superseded_by_version is None:
                        out[index] = out[index].marked(superseded_by_version=event.originator_version)
            by_position.setdefault(event.position, []).append(len(out))
            out.append(TranscriptEntry.from_event(event))
        elif isinstance(event, MessagesRetracted):
            for position in event.positions:
                for index in by_position.get(position, []):
                    out[index] = out[index].marked(
                        retracted=True,
                        retracted_version=event.originator_version,
                        retracted_reason=event.reason,
                    )
    return sorted(out, key=transcript_order)


def summary_infos(
    store: ConversationStore, conversation_id: UUID, *, through_version: int | None = None
) -> list[SummaryInfo]:
    """Every summary the conversation rests on, oldest first: a fork's shared history's
    first (as they stood at the fork's version, marked ``inherited_from``), then its
    own; marked invalid where a ``SummaryInvalidated`` event took one back."""
    events = _summary_events(store, conversation_id)
    if through_version is not None:
        events = [e for e in events if e.originator_version <= through_version]
    found: dict[tuple[UUID | None, int], SummaryInfo] = {}
    first = events[0] if events else None
    if isinstance(first, Forked):
        origin = first.origin
        for info in summary_infos(store, origin.conversation_id, through_version=origin.version):
            holder = info.inherited_from or origin.conversation_id
            found[(holder, info.version)] = replace(info, inherited_from=holder)
    for event in events:
        if isinstance(event, SummaryCreated):
            found[(None, event.originator_version)] = SummaryInfo.from_event(event)
        elif isinstance(event, NativeSummaryReadable):
            made = found.get((event.summary_origin, event.summary_version))
            if made is not None and not made.text:
                key = (event.summary_origin, event.summary_version)
                found[key] = replace(made, text=event.text, tokens=event.tokens)
        elif isinstance(event, SummaryInvalidated):
            keys: list[tuple[UUID | None, int]] = [(None, v) for v in event.invalidated_versions]
            keys += [(link.origin, link.version) for link in event.invalidated_inherited]
            for key in keys:
                standing = found.get(key)
                if standing is not None and standing.valid:
                    found[key] = replace(
                        standing,
                        valid=False,
                        invalidated_version=event.originator_version,
                        invalidated_reason=event.reason,
                        invalidated_in=conversation_id,
                    )
    return list(found.values())


_SUMMARY_KINDS = (SummaryCreated, NativeSummaryReadable, SummaryInvalidated)
#: By stored topic: whether ``_summary_events`` decodes its records.
_WANTED: dict[str, bool] = {}


def _wanted(topic: str) -> bool:
    """A summary's topic, or one that does not resolve here (decoded, so that the
    decoder names the fault)."""
    wanted = _WANTED.get(topic)
    if wanted is None:
        try:
            kind = resolve_topic(topic)
        except Exception:
            wanted = True
        else:
            wanted = not isinstance(kind, type) or issubclass(kind, _SUMMARY_KINDS)
        if len(_WANTED) < 4096:
            _WANTED[topic] = wanted
    return wanted


def _summary_events(store: ConversationStore, conversation_id: UUID) -> list[Any]:
    """The conversation's events as ``store.events`` gives them, but of those after its
    first only the ones about summaries: the other records are not decoded (nor
    decrypted). A log that does not begin with its start (an erased fork's remainder,
    a damaged log) is read the general way, which says why."""
    log: Any = store.app.events
    if hasattr(log, "of"):  # a sharded store's: the conversation's own store
        log = log.of(conversation_id)
    if not hasattr(log, "recorder"):
        return store.events(conversation_id)
    with store_errors(conversation_id):
        records = log.recorder.select_events(conversation_id)
        first = log.mapper.to_domain_event(records[0]) if records else None
        if not isinstance(first, (Started, Forked)) or first.originator_version != 1:
            return store.events(conversation_id)
        found: list[Any] = [first]
        for record in records[1:]:
            if _wanted(record.topic):
                found.append(log.mapper.to_domain_event(record))
    return found


def shared_history(store: ConversationStore, conversation_id: UUID) -> SharedHistory | None:
    """What a fork inherited from its source (None: not a fork)."""
    with store_errors(conversation_id):
        first = next(iter(store.app.events.get(conversation_id, lte=1)), None)
    return SharedHistory.of(first) if isinstance(first, Forked) else None


def event_marks(store: ConversationStore, conversation_id: UUID) -> dict[int, dict[str, Any]]:
    """By version of the conversation's own events, what later events did to them:
    a message retracted (version, reason) or replaced by an edit (the edit's version);
    an edit's original message and its version; a summary invalidated (version,
    reason); a fork's origin (on its ``Forked`` event, version 1). Events nothing
    concerns are left out. The command line's ``replay``/``export`` and the viewer
    show these."""
    marks: dict[int, dict[str, Any]] = {}
    entries = transcript_entries(store, conversation_id)
    for entry in entries:
        if entry.inherited_from is not None:
            continue
        mark: dict[str, Any] = {}
        if entry.retracted:
            mark.update(
                retracted=True,
                retracted_version=entry.retracted_version,
                retracted_reason=entry.retracted_reason,
            )
        if entry.superseded_by_version is not None:
            mark["superseded_by_version"] = entry.superseded_by_version
        if entry.edited_from_version is not None:
            replaced = [
                e
                for e in entries
                if e.position == entry.position and e.superseded_by_version == entry.version
            ]
            if replaced:
                mark.update(original=replaced[-1].message, original_version=replaced[-1].version)
        if mark:
            marks[entry.version] = mark
    for summary in summary_infos(store, conversation_id):
        if not summary.valid and summary.inherited_from is None:
            marks[summary.version] = {
                "valid": False,
                "invalidated_version": summary.invalidated_version,
                "invalidated_reason": summary.invalidated_reason,
            }
    with store_errors(conversation_id):
        first = next(iter(store.app.events.get(conversation_id, lte=1)), None)
    if isinstance(first, Forked):
        marks[1] = {
            "forked_from": str(first.origin.conversation_id),
            "forked_at_version": first.origin.version,
            "through_position": first.origin.through_position,
        }
    return marks
