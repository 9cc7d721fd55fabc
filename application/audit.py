"""Audits over the log: verify the digest chains, replay and export events.

``verify`` recomputes every message's chained digest and every summary's source
digest from the stored events; an altered event shows as a ``VerifyProblem`` at its
version. ``replay`` and ``export`` show the stored events as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from uuid import UUID

from eventsourcing.application import Application

from contextledger.application.notifications import read_notifications
from contextledger.application.results import AuditEvent, VerifyProblem, VerifyReport
from contextledger.application.store import ConversationStore, store_errors
from contextledger.domain.digests import (
    chain_digest,
    edit_digest,
    genesis_digest,
    summary_source_digest,
)
from contextledger.domain.edits import (
    HistoryFold,
    edit_record,
    retraction_record,
    system_prompt_record,
)
from contextledger.domain.events import (
    DomainEvent,
    Forked,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    Started,
    SummaryCreated,
    SummaryInvalidated,
    SystemPromptChanged,
)

__all__ = ["Audit", "verify_conversation"]


class Audit:
    """Read-only audits of one ledger's log."""

    def __init__(self, app: Application[UUID], store: ConversationStore) -> None:
        self.app = app
        self.store = store

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
        """Every stored event of the conversation, in order."""
        for event in self.store.events(conversation_id):
            yield AuditEvent.from_event(event)

    def export(self) -> Iterator[tuple[int, AuditEvent]]:
        """Every stored event of every conversation, with its notification id."""
        with store_errors():
            for page in read_notifications(self.app.notification_log, committed=True):
                for notification in page:
                    event = self.app.mapper.to_domain_event(notification)
                    yield notification.id, AuditEvent.from_event(event)  # type: ignore[arg-type]

    def verify(self, conversation_id: UUID | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest; report what does not match."""
        ids = [conversation_id] if conversation_id is not None else self.conversation_ids()
        problems: list[VerifyProblem] = []
        events = messages = summaries = 0
        for cid in ids:
            stored = self.store.events(cid)
            base: HistoryFold | None = None
            source_digest: str | None = None
            first = stored[0]
            if isinstance(first, Forked):
                from contextledger.application.history import fold_history

                origin = first.origin
                base = fold_history(self.store, origin.conversation_id, through_version=origin.version)
                source = [
                    e
                    for e in self.store.events(origin.conversation_id)
                    if e.originator_version <= origin.version
                ]
                source_digest = next(
                    (str(d) for e in reversed(source) if isinstance(d := getattr(e, "digest", None), str)),
                    None,
                )
            found = verify_conversation(cid, stored, base=base, source_digest=source_digest)
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
        )


def verify_conversation(
    cid: UUID,
    events: list[DomainEvent],
    *,
    base: HistoryFold | None = None,
    source_digest: str | None = None,
) -> tuple[int, int, int, list[VerifyProblem]]:
    """Recompute the digest chain (messages and edits), every summary's source digest
    and every invalidation's reopened messages. ``base`` and ``source_digest``: a
    fork's shared history and its source's digest at the fork version."""
    problems: list[VerifyProblem] = []
    first = events[0]
    if isinstance(first, Forked):
        fold = HistoryFold(base, through_position=first.origin.through_position)
        digest = first.digest
        if source_digest is not None and source_digest != first.digest:
            problems.append(VerifyProblem(cid, 1, "the fork's digest is not its source's at that version"))
        layers: list[tuple[int, int, str]] = [
            (int(layer["from_position"]), int(layer["through_position"]), str(layer["text"]))
            for layer in first.state.get("summaries", [])
            if isinstance(layer, dict)
        ]
    else:
        assert isinstance(first, Started)
        fold = HistoryFold()
        digest = genesis_digest(str(cid), first.system_prompt, first.model)
        if digest != first.digest:
            problems.append(VerifyProblem(cid, 1, "the Started event was altered"))
        layers = []
    texts: dict[int, str] = {}
    n_messages = n_summaries = 0

    def check(event: DomainEvent, expected: str, stored: str, what: str) -> str:
        if expected != stored:
            problems.append(VerifyProblem(cid, event.originator_version, f"{what} does not match its digest"))
        return stored

    for index, event in enumerate(events):
        version = event.originator_version
        if version != index + 1:
            problems.append(VerifyProblem(cid, version, "version gap"))
        if isinstance(event, MessageAppended):
            n_messages += 1
            if event.position != fold.next_position:
                problems.append(VerifyProblem(cid, version, "position gap"))
            expected = chain_digest(digest, event.message, event.items, event.envelope)
            digest = check(event, expected, event.digest, f"message {event.position}")
        elif isinstance(event, MessageEdited):
            record = edit_record(event.position, event.replaces_version, event.message)
            digest = check(event, edit_digest(digest, record), event.digest, f"the edit of {event.position}")
            if event.position not in fold.entries:
                problems.append(
                    VerifyProblem(cid, version, f"edit of a retracted or unknown {event.position}")
                )
        elif isinstance(event, MessagesRetracted):
            record = retraction_record(event.command, event.positions, event.reason)
            digest = check(event, edit_digest(digest, record), event.digest, "the retraction")
        elif isinstance(event, SystemPromptChanged):
            record = system_prompt_record(event.system_prompt)
            digest = check(event, edit_digest(digest, record), event.digest, "the system prompt change")
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
            folds = event.covers_from == 0 and all(t < event.from_position for _, t, _ in layers)
            prev = "\n\n".join(text for _, _, text in layers) if folds and layers else None
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
