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
from contextledger.domain.digests import chain_digest, genesis_digest, summary_source_digest
from contextledger.domain.events import DomainEvent, MessageAppended, Started, SummaryCreated
from contextledger.domain.messages import Message

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
                for page in read_notifications(self.app.notification_log, topics=(Started.TOPIC,))
                for n in page
            ]

    def replay(self, conversation_id: UUID) -> Iterator[AuditEvent]:
        """Every stored event of the conversation, in order."""
        for event in self.store.events(conversation_id):
            yield AuditEvent.from_event(event)

    def export(self) -> Iterator[tuple[int, AuditEvent]]:
        """Every stored event of every conversation, with its notification id."""
        with store_errors():
            for page in read_notifications(self.app.notification_log):
                for notification in page:
                    event = self.app.mapper.to_domain_event(notification)
                    yield notification.id, AuditEvent.from_event(event)  # type: ignore[arg-type]

    def verify(self, conversation_id: UUID | None = None) -> VerifyReport:
        """Recompute every digest chain and summary digest; report what does not match."""
        ids = [conversation_id] if conversation_id is not None else self.conversation_ids()
        problems: list[VerifyProblem] = []
        events = messages = summaries = 0
        for cid in ids:
            found = verify_conversation(cid, self.store.events(cid))
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
    cid: UUID, events: list[DomainEvent]
) -> tuple[int, int, int, list[VerifyProblem]]:
    problems: list[VerifyProblem] = []
    messages: dict[int, Message] = {}
    started = events[0]
    assert isinstance(started, Started)
    digest = genesis_digest(str(cid), started.system_prompt, started.model)
    if digest != started.digest:
        problems.append(VerifyProblem(cid, 1, "the Started event was altered"))
    layers: list[str] = []
    n_messages = n_summaries = 0
    for index, event in enumerate(events):
        if event.originator_version != index + 1:
            problems.append(VerifyProblem(cid, event.originator_version, "version gap"))
        if isinstance(event, MessageAppended):
            n_messages += 1
            if event.position != len(messages):
                problems.append(VerifyProblem(cid, event.originator_version, "position gap"))
            digest = chain_digest(digest, event.message, event.items)
            if digest != event.digest:
                problems.append(
                    VerifyProblem(
                        cid,
                        event.originator_version,
                        f"message {event.position} does not match its digest",
                    )
                )
                digest = event.digest
            messages[event.position] = event.message
        elif isinstance(event, SummaryCreated):
            n_summaries += 1
            covered = [messages.get(p) for p in range(event.from_position, event.through_position + 1)]
            if any(m is None for m in covered):
                problems.append(
                    VerifyProblem(cid, event.originator_version, "summary covers unknown messages")
                )
                continue
            prev = "\n\n".join(layers) if event.covers_from == 0 and layers else None
            expected = summary_source_digest(prev, [m for m in covered if m is not None])
            if expected != event.source_digest:
                problems.append(
                    VerifyProblem(
                        cid,
                        event.originator_version,
                        f"summary of {event.from_position}-{event.through_position} does not "
                        "match the messages it covers",
                    )
                )
            layers = [event.text] if event.covers_from == 0 else [*layers, event.text]
    return len(events), n_messages, n_summaries, problems
