"""Audits over the log: verify the digest chains, replay and export events.

``verify`` recomputes every message's chained digest and every summary's source
digest from the stored events; an altered event shows as a ``VerifyProblem`` at its
version. ``replay`` and ``export`` show the stored events as they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence, Set
from uuid import UUID

from eventsourcing.application import Application

from contextledger.application.auditing.erased import (
    erased_records,
    inherited_digest,
    recorded_structure,
)
from contextledger.application.auditing.integrity import (
    FOREIGN as _FOREIGN,
)
from contextledger.application.auditing.integrity import (
    ApplicationLog,
    HeadRecords,
    check_fold,
    check_head,
    check_seals,
    missing_versions,
    read_events,
)
from contextledger.application.following.notifications import read_notifications
from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.results import AuditEvent, VerifyProblem, VerifyReport
from contextledger.application.storage.remainders import remainder
from contextledger.application.storage.store import ConversationStore, store_errors
from contextledger.domain.commands.edits import HistoryFold
from contextledger.domain.commands.links import expected_link
from contextledger.domain.erasure import ErasedEvent, Erasure
from contextledger.domain.events import (
    ConversationEvent,
    DomainEvent,
    Forked,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    NativeSummaryReadable,
    Started,
    SummaryCreated,
    SummaryInvalidated,
    SystemPromptChanged,
)
from contextledger.domain.remainder import ERASED_DIGEST, Remainder
from contextledger.domain.values.digests import summary_source_digest
from contextledger.domain.values.errors import (
    ContextLedgerError,
    ConversationErasedError,
    ConversationNotFoundError,
)

__all__ = ["Audit", "verify_conversation", "verify_remainder"]

#: Topic prefix of a conversation's events (every one of them, whatever its kind).
_CONVERSATION_TOPICS = "contextledger.conversation."


class Audit:
    """Read-only audits of one ledger's log."""

    def __init__(
        self, app: Application[UUID], store: ConversationStore, counters: TokenCounters | None = None
    ) -> None:
        self.app = app
        self.store = store
        #: Recounts every stored token count when given.
        self.counters = counters
        #: Where the read models say each conversation's log reaches (None: none kept).
        self.heads: HeadRecords | None = None

    def conversation_ids(self) -> list[UUID]:
        """Ids of every conversation, in the order they were started."""
        with store_errors():
            return [
                UUID(str(n.originator_id))
                for page in read_notifications(
                    self.app.notification_log, topics=(Started.TOPIC, Forked.TOPIC), committed=True
                )
                for n in page
            ]

    def replay(self, conversation_id: UUID) -> Iterator[AuditEvent]:
        """Every stored event of the conversation, in order (read now, from the store:
        iterating touches the store no more, even once the ledger is closed)."""
        events = self.store.records(conversation_id)
        return (AuditEvent.from_event(event) for event in events)

    def export(self) -> Iterator[tuple[int, AuditEvent]]:
        """Every stored event of every conversation, with its notification id."""
        with store_errors():
            for page in read_notifications(self.app.notification_log, committed=True):
                for notification in page:
                    event = self.app.mapper.to_domain_event(notification)
                    yield notification.id, AuditEvent.from_event(event)  # type: ignore[arg-type]

    def verify(self, conversation_id: UUID | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest, read every stored event
        and snapshot, compare the snapshots with the events and recount the tokens;
        report what does not match. A damaged conversation is reported, not raised:
        the others are verified all the same."""
        ids = [conversation_id] if conversation_id is not None else self.stored_conversation_ids()
        problems: list[VerifyProblem] = []
        erased: list[UUID] = []
        partly: list[UUID] = []
        checked: list[UUID] = []
        unverified: list[VerifyProblem] = []
        events = messages = summaries = 0
        for cid in ids:
            gone = self._erased(cid)
            if gone is not None:
                problems.extend(self._unrecorded(cid, gone))
                rest = self._remainder(cid)
                app = self._app(cid)
                try:
                    with store_errors(cid):
                        log, stored = recorded_structure(app, gone), erased_records(app, cid)
                except ContextLedgerError as exc:  # a damaged record: reported, not raised
                    problems.append(VerifyProblem(cid, 1, f"its erasure cannot be checked: {exc.message}"))
                    log, stored = None, []
                if rest is None:
                    erased.append(cid)
                    if log is None:  # erased before erasures recorded the structure
                        continue
                    checked.append(cid)
                    checks = inherited_digest(self.store, self._erased, self._app, stored, log, whole=True)
                    found = (len(stored), 0, 0, checks[0])
                else:
                    partly.append(cid)
                    found = verify_remainder(
                        rest, unverified, *inherited_digest(self.store, self._erased, self._app, stored, log)
                    )
            else:
                found = self._verify_one(cid, listed=conversation_id is None)
            events += found[0]
            messages += found[1]
            summaries += found[2]
            problems.extend(found[3])
        return VerifyReport(
            conversations=len(ids),
            events=events,
            messages=messages,
            summaries=summaries,
            problems=tuple(problems),
            erased=tuple(erased),
            erased_checked=tuple(checked),
            partly_erased=tuple(partly),
            unverified=tuple(unverified),
        )

    def _app(self, cid: UUID) -> Application[UUID]:
        app_for = getattr(self.store, "app_for", None)
        return app_for(cid) if app_for is not None else self.app

    def _remainder(self, cid: UUID) -> Remainder | None:
        """What is left of a fork whose inherited history was erased (None: the
        conversation was erased whole)."""
        app = self._app(cid)
        try:
            return remainder(app.events, cid)
        except ConversationErasedError:
            return None

    def _erased(self, cid: UUID) -> ErasedEvent | None:
        """The conversation's first record if its content was erased: it reads as an
        ``ErasedEvent`` (a fork's first record holds its inherited history)."""
        app = self._app(cid)
        try:
            with store_errors(cid):
                first = app.recorder.select_events(cid, limit=1)
                event = app.mapper.to_domain_event(first[0]) if first else None
        except ContextLedgerError:  # damaged: verifying it says where
            return None
        return event if isinstance(event, ErasedEvent) else None

    def _unrecorded(self, cid: UUID, gone: ErasedEvent) -> list[VerifyProblem]:
        """A problem for each subject whose key was destroyed (a tombstone) with no
        ``ContentErased`` record of its erasure in the log: the record was deleted,
        or the erasure stopped between the two (erasing again records it)."""
        app = self._app(cid)
        problems: list[VerifyProblem] = []
        for subject in dict.fromkeys((gone.subject, *gone.subjects)):
            with store_errors(cid):
                recorded = app.recorder.select_events(Erasure.id_for(subject), limit=1)
            if not recorded:
                problems.append(
                    VerifyProblem(
                        cid,
                        gone.originator_version,
                        f"data subject {subject!r} was erased (its key is a tombstone), but the "
                        "log holds no ContentErased record of that erasure: it was deleted, or "
                        "the erasure stopped before recording it (erase the subject again)",
                    )
                )
        return problems

    def _head(self, cid: UUID) -> int | None:
        """The version the read models applied the conversation through (None: no
        read models, or they cannot be read: the check is then skipped)."""
        if self.heads is None:
            return None
        try:
            return self.heads.head_version(cid)
        except ContextLedgerError:
            return None

    def stored_conversation_ids(self) -> list[UUID]:
        """Ids of every conversation with an event in the log, in the order of their
        first stored event: also those whose ``Started`` is missing."""
        seen: dict[UUID, None] = {}
        with store_errors():
            for page in read_notifications(self.app.notification_log, committed=True):
                for n in page:
                    if n.topic.startswith(_CONVERSATION_TOPICS):
                        seen.setdefault(UUID(str(n.originator_id)), None)
        return list(seen)

    def _verify_one(self, cid: UUID, *, listed: bool) -> tuple[int, int, int, list[VerifyProblem]]:
        # Listed from this store's log, the conversation is read from it; asked for by id,
        # from the store that holds it (several stores: the router says which).
        app_for = None if listed else getattr(self.store, "app_for", None)
        log = ApplicationLog(app_for(cid) if app_for is not None else self.app)
        head = self._head(cid)  # before the log: what is appended meanwhile is no gap
        with store_errors(cid):
            stored, unreadable, problems = read_events(log, cid)
        if not listed and not stored and all(p.problem.endswith(_FOREIGN) for p in problems):
            raise ConversationNotFoundError("no such conversation", conversation_id=cid)
        last = max([*unreadable, *(e.originator_version for e in stored)], default=0)
        base: HistoryFold | None = None
        source_digest: str | None = None
        first = stored[0] if stored else None
        if isinstance(first, Forked) and first.originator_version == 1:
            from contextledger.application.summaries.history import fold_history

            origin = first.origin
            try:
                base = fold_history(self.store, origin.conversation_id, through_version=origin.version)
                source = [
                    e
                    for e in self.store.events(origin.conversation_id)
                    if e.originator_version <= origin.version
                ]
            except ContextLedgerError as exc:
                problems.append(VerifyProblem(cid, 1, f"the fork's source cannot be read: {exc.message}"))
                source = []
            source_digest = next(
                (str(d) for e in reversed(source) if isinstance(d := getattr(e, "digest", None), str)),
                None,
            )
        found = verify_conversation(
            cid, stored, base=base, source_digest=source_digest, unreadable=unreadable
        )
        problems += found[3]
        problems += check_seals(cid, stored)
        with store_errors(cid):
            problems += check_fold(log, cid, stored, last_version=last, counters=self.counters)
        problems += check_head(cid, head, last)
        problems.sort(key=lambda p: p.version)  # stable: at one version, the digest's first
        return len(stored) + len(unreadable), found[1], found[2], problems


def verify_conversation(
    cid: UUID,
    events: Sequence[DomainEvent],
    *,
    base: HistoryFold | None = None,
    source_digest: str | None = None,
    unreadable: Set[int] = frozenset(),
    start_position: int = 0,
    chain_from: str | None = None,
) -> tuple[int, int, int, list[VerifyProblem]]:
    """Recompute the digest chain (messages and edits), every summary's source digest
    and every invalidation's reopened messages; report gaps in versions. ``base`` and
    ``source_digest``: a fork's shared history and its source's digest at the fork
    version; ``unreadable``: versions stored but undecodable (reported by the reader,
    not as gaps). After a gap the chain goes on from the next stored digest.
    ``start_position``: the first position there is (a fork's remainder's own part);
    ``chain_from``: there, the digest its chain goes on from (its unreadable records
    are then its erased ones, none a link)."""
    problems: list[VerifyProblem] = []
    if not events:
        return 0, 0, 0, problems
    first = events[0]
    digest: str | None
    if first.originator_version != 1:
        fold = HistoryFold()
        fold.next_position = start_position
        digest = chain_from
        layers: list[tuple[int, int, str]] = []
    elif isinstance(first, Forked):
        fold = HistoryFold(base, through_position=first.origin.through_position)
        digest = first.digest
        if source_digest is not None and source_digest != first.digest:
            problems.append(VerifyProblem(cid, 1, "the fork's digest is not its source's at that version"))
        layers = [
            (int(layer["from_position"]), int(layer["through_position"]), str(layer["text"]))
            for layer in first.state.get("summaries", [])
            if isinstance(layer, dict)
        ]
    elif isinstance(first, Started):
        fold = HistoryFold()
        digest = expected_link("", first)
        if digest != first.digest:
            problems.append(VerifyProblem(cid, 1, "the Started event was altered"))
        layers = []
    else:
        fold = HistoryFold()
        digest = None
        layers = []
        problems.append(
            VerifyProblem(cid, 1, f"the log begins with {type(first).__name__}, not with Started or Forked")
        )
    texts: dict[int, str] = {}
    n_messages = n_summaries = 0

    def check(event: DomainEvent, expected: str | None, stored: str, what: str) -> str:
        """The chain's next link: ``stored``, checked unless the previous is unknown."""
        if expected is not None and expected != stored:
            problems.append(VerifyProblem(cid, event.originator_version, f"{what} does not match its digest"))
        return stored

    expected_version = 1
    for event in events:
        version = event.originator_version
        if version > expected_version:
            lost = [v for v in range(expected_version, version) if v not in unreadable]
            if chain_from is None or lost:
                digest = None  # the links in between are lost: go on from the next one
            problems.extend(_gaps(cid, lost))
        elif version < expected_version:
            problems.append(VerifyProblem(cid, version, "version out of order"))
        expected_version = version + 1
        if isinstance(event, MessageAppended):
            n_messages += 1
            if event.position != fold.next_position and digest is not None:
                problems.append(VerifyProblem(cid, version, "position gap"))
            expected = None if digest is None else expected_link(digest, event)
            digest = check(event, expected, event.digest, f"message {event.position}")
        elif isinstance(event, MessageEdited):
            expected = None if digest is None else expected_link(digest, event)
            digest = check(event, expected, event.digest, f"the edit of {event.position}")
            if event.position not in fold.entries:
                problems.append(
                    VerifyProblem(cid, version, f"edit of a retracted or unknown {event.position}")
                )
        elif isinstance(event, MessagesRetracted):
            expected = None if digest is None else expected_link(digest, event)
            digest = check(event, expected, event.digest, "the retraction")
        elif isinstance(event, SystemPromptChanged):
            expected = None if digest is None else expected_link(digest, event)
            digest = check(event, expected, event.digest, "the system prompt change")
        elif isinstance(event, SummaryCreated):
            n_summaries += 1
            texts[version] = event.text
            span = range(event.from_position, event.through_position + 1)
            if any(p not in fold.entries and p not in fold.retracted for p in span):
                problems.append(VerifyProblem(cid, version, "summary covers unknown messages"))
                continue
            covered = [fold.entries[p].message for p in span if p in fold.entries]
            # A summary re-folds the layers before it (single mode, consolidation), never
            # those after it (a gap an invalidation reopened between layers).
            folds = event.covers_from == start_position and all(t < event.from_position for _, t, _ in layers)
            prev = ("\n\n".join(text for _, _, text in layers) or None) if folds and layers else None
            if summary_source_digest(prev, covered) != event.source_digest:
                problems.append(
                    VerifyProblem(
                        cid,
                        version,
                        f"summary of {event.from_position}-{event.through_position} does not "
                        "match the messages it covers",
                    )
                )
            own = (event.covers_from, event.through_position, event.text)
            layers = [own] if folds else sorted([*layers, own])
        elif isinstance(event, NativeSummaryReadable) and event.summary_origin is None:
            # The readable text of an opaque native summary: what later summaries extend.
            texts[event.summary_version] = event.text
            layers = [(c, t, x or event.text if t == event.through_position else x) for c, t, x in layers]
        elif isinstance(event, SummaryInvalidated):
            for entry in event.reopened:
                current = fold.entries.get(entry.position)
                if current is None or current.message != entry.message:
                    problems.append(
                        VerifyProblem(
                            cid, version, f"reopened message {entry.position} is not the current one"
                        )
                    )
            for layer in event.layers:
                link = layer.link
                known = texts.get(link.version, layer.text) if link is not None else layer.text
                if link is not None and link.origin is None and known != layer.text:
                    problems.append(
                        VerifyProblem(cid, version, f"restored summary {link.version} was altered")
                    )
            layers = [(x.from_position, x.through_position, x.text) for x in event.layers]
        fold.apply(event)
    return len(events), n_messages, n_summaries, problems


def verify_remainder(
    rest: Remainder,
    unverified: list[VerifyProblem],
    erased_problems: Sequence[VerifyProblem] = (),
    inherited: str | None = None,
) -> tuple[int, int, int, list[VerifyProblem]]:
    """Verify what is readable of a fork whose inherited history was erased: its digest
    chain (from ``inherited``, the erased inherited digest its erasure recorded; None:
    from its second own link on), its summaries and its seals, with the problems of
    its erased records (``erased_problems``: checked against that record). What cannot
    be verified goes to ``unverified``: the erased records' content, and the chain's
    first link after them when the inherited digest is unknown."""
    cid = rest.conversation_id
    stored = [r for r in rest.records if isinstance(r, ConversationEvent)]
    erased = rest.erased_versions
    unverified.append(
        VerifyProblem(
            cid,
            1,
            f"erased with its source's data subject: the inherited history (positions before "
            f"{rest.erased_before}; versions {', '.join(map(str, erased))})",
        )
    )
    linked = (MessageAppended, MessageEdited, MessagesRetracted, SystemPromptChanged)
    first_link = next((e for e in stored if isinstance(e, linked)), None)
    if first_link is not None and expected_link(ERASED_DIGEST, first_link) == first_link.digest:
        inherited = ERASED_DIGEST  # appended after the erasure, to the remainder's chain
    if first_link is not None and inherited is None:
        unverified.append(
            VerifyProblem(
                cid,
                first_link.originator_version,
                "not verifiable past the erasure: this link of the digest chain continues "
                "the erased inherited history's digest",
            )
        )
    inherited_edits = {
        e.originator_version
        for e in stored
        if isinstance(e, MessageEdited) and e.position < rest.erased_before
    }
    found = verify_conversation(
        cid,
        stored,
        unreadable=frozenset(erased),
        start_position=rest.erased_before,
        chain_from=inherited,
    )
    problems = [*erased_problems] + [
        p
        for p in found[3]
        if not (p.version in inherited_edits and p.problem.startswith("edit of a retracted or unknown"))
    ]
    problems += check_seals(cid, stored)
    problems.sort(key=lambda p: p.version)
    return found[0] + len(erased), found[1], found[2], problems


def _gaps(cid: UUID, versions: list[int]) -> list[VerifyProblem]:
    """One problem per run of consecutive missing versions."""
    runs: list[list[int]] = []
    for v in versions:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return [VerifyProblem(cid, a, missing_versions(a, b)) for a, b in runs]
