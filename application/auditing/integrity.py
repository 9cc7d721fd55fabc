"""What ``verify`` checks beside the digest chains: that the stored log can be read
and that everything loading trusts agrees with it.

- Every stored event is read on its own: one that cannot be decoded (damaged bytes,
  an unknown topic, a state that does not fit its class) is a problem at its version,
  and the audit carries on with the others, and with the rest of the store.
- Every snapshot equals the fold of the events it stands for. A conversation loads
  from its latest snapshot, so a snapshot edited in the store would change what the
  model is sent; here the state the events fold to is compared with each snapshot's,
  field by field (system prompt, tools, policy, summaries, the window, the totals).
- Every token count equals a recount with the conversation's token counter: a
  message's and its placeholder's, the system prompt's, the tool definitions', a
  summary's text and message. Counts are outside the digest chain and make up the
  totals and the context's cost, so they are recomputed rather than trusted.
- Every sealed event (all but messages) still matches its seal, which covers all of
  its fields: the policy, the tool definitions, a summary's text, usage... Once a
  conversation's events are sealed, a later one without a seal had it removed.
- The log does not end before a head record says it reaches: the latest snapshot's
  version, and the version the read models applied (``HeadRecords``). Events deleted
  from the end leave an intact chain; only such a record shows they are gone.

The checks read a conversation through ``StoredLog`` (its stored events and
snapshots, and the mapper that decodes them), not through the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import StoredEvent
from pydantic import BaseModel

from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.results import VerifyProblem
from contextledger.domain.conversation import Conversation, ConversationSnapshot
from contextledger.domain.events import (
    ConversationEvent,
    MessageAppended,
    MessageEdited,
    SealedEvent,
    Started,
    SummaryCreated,
    SystemPromptChanged,
    ToolsChanged,
)
from contextledger.domain.values.errors import ContextLedgerError, LogDamagedError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import placeholder_text, summary_message

__all__ = [
    "FOREIGN",
    "ApplicationLog",
    "HeadRecords",
    "StoredLog",
    "check_fold",
    "check_head",
    "check_seals",
    "missing_versions",
    "read_events",
]


class StoredLog(Protocol):
    """A conversation's stored records as they are, and the mapper that decodes them."""

    def stored_events(self, conversation_id: UUID) -> Sequence[StoredEvent]: ...

    def stored_snapshots(self, conversation_id: UUID) -> Sequence[StoredEvent]: ...

    def decode(self, stored: StoredEvent) -> object:
        """The domain event (or snapshot); ``StoreError`` if it cannot be decoded."""
        ...

    def plain(self, event: object) -> bytes:
        """The bytes the event (or snapshot) is stored as, before any encryption."""
        ...

    def stored_plain(self, stored: StoredEvent) -> bytes | None:
        """A stored record's bytes before any encryption (None: not readable here)."""
        ...


class ApplicationLog:
    """``StoredLog`` over an eventsourcing application's recorders and mapper."""

    def __init__(self, app: Application[UUID]) -> None:
        self.app = app

    def stored_events(self, conversation_id: UUID) -> Sequence[StoredEvent]:
        return self.app.recorder.select_events(conversation_id)

    def stored_snapshots(self, conversation_id: UUID) -> Sequence[StoredEvent]:
        snapshots = self.app.snapshots
        return () if snapshots is None else snapshots.recorder.select_events(conversation_id)

    def decode(self, stored: StoredEvent) -> object:
        return self.app.mapper.to_domain_event(stored)

    def plain(self, event: object) -> bytes:
        mapper: Any = self.app.mapper
        if hasattr(mapper, "plain_state"):
            return bytes(mapper.plain_state(event))
        return bytes(mapper.to_stored_event(event).state)

    def stored_plain(self, stored: StoredEvent) -> bytes | None:
        mapper: Any = self.app.mapper
        return mapper.stored_plain(stored) if hasattr(mapper, "stored_plain") else bytes(stored.state)


class HeadRecords(Protocol):
    """Where a record kept beside the log says a conversation's log reaches."""

    def head_version(self, conversation_id: UUID) -> int | None:
        """The last version of the conversation this record has applied (None: it
        holds nothing about the conversation)."""
        ...


def check_head(conversation_id: UUID, head: int | None, last_version: int) -> list[VerifyProblem]:
    """A problem if the read models applied the conversation through ``head`` and its
    log ends before it, at ``last_version``: events were deleted from its end (or the
    store was restored from a backup older than its read models). ``head`` must be
    read before the log, so that an event appended in between is no false alarm."""
    if head is None or head <= last_version:
        return []
    lost = last_version + 1
    which = f"version {lost} is" if lost == head else f"versions {lost}-{head} are"
    return [
        VerifyProblem(
            conversation_id,
            lost,
            f"the read models applied the conversation through version {head}, but the log "
            f"ends at version {last_version}: the events at {which} missing (deleted, or the "
            "store was restored from a backup older than its read models)",
        )
    ]


#: What an event of another aggregate (a client message id, a placement) is.
FOREIGN = "is not a conversation's event"


def missing_versions(first: int, last: int) -> str:
    """What a gap in versions from ``first`` through ``last`` says."""
    if first == 1:
        lost = "the conversation's first event (its Started or Forked) is missing"
        return lost if last == 1 else f"{lost}, and the events through version {last}"
    if first == last:
        return f"the event at version {first} is missing"
    return f"the events at versions {first}-{last} are missing"


def read_events(
    log: StoredLog, conversation_id: UUID
) -> tuple[list[ConversationEvent], set[int], list[VerifyProblem]]:
    """The conversation's decodable events, the versions of those that are not, and
    a problem for each of those."""
    events: list[ConversationEvent] = []
    unreadable: set[int] = set()
    problems: list[VerifyProblem] = []
    for stored in log.stored_events(conversation_id):
        version = stored.originator_version
        try:
            event = log.decode(stored)
        except ContextLedgerError as exc:
            unreadable.add(version)
            problems.append(VerifyProblem(conversation_id, version, f"undecodable event: {exc.message}"))
            continue
        if not isinstance(event, ConversationEvent):
            unreadable.add(version)
            problems.append(
                VerifyProblem(
                    conversation_id,
                    version,
                    f"the event at version {version} ({stored.topic}) {FOREIGN}",
                )
            )
            continue
        events.append(event)
    return events, unreadable, problems


def check_seals(conversation_id: UUID, events: list[ConversationEvent]) -> list[VerifyProblem]:
    """A problem for each sealed event whose fields no longer match its seal, and for
    each event without a seal after one with (events stored before seals existed
    have none)."""
    problems: list[VerifyProblem] = []
    sealed_from: int | None = None
    for event in events:
        if not isinstance(event, SealedEvent):
            continue
        version, kind = event.originator_version, type(event).__name__
        if event.seal is None:
            if sealed_from is not None:
                problems.append(
                    VerifyProblem(
                        conversation_id,
                        version,
                        f"the {kind} event has no seal, though the events from version "
                        f"{sealed_from} on are sealed: its seal was removed",
                    )
                )
            continue
        if sealed_from is None:
            sealed_from = version
        if event.seal != event.expected_seal():
            problems.append(
                VerifyProblem(conversation_id, version, f"the {kind} event does not match its seal")
            )
    return problems


def check_fold(
    log: StoredLog,
    conversation_id: UUID,
    events: list[ConversationEvent],
    *,
    last_version: int,
    counters: TokenCounters | None,
) -> list[VerifyProblem]:
    """Fold the events as loading does, recount every token count on the way, and
    compare each stored snapshot with the fold at its version. ``last_version``: the
    last version stored (decodable or not). The fold stops at the first event that
    does not follow (a gap, a missing first event): what comes after is not checked
    here (the gap is a problem of its own)."""
    problems: list[VerifyProblem] = []
    snapshots = {stored.originator_version: stored for stored in log.stored_snapshots(conversation_id)}
    for version in sorted(v for v in snapshots if v > last_version):
        problems.append(
            VerifyProblem(
                conversation_id,
                version,
                f"a snapshot stands for version {version}, but the log ends at version "
                f"{last_version}: the events after it are missing",
            )
        )
    conversation: Conversation | None = None
    recount = _Recount(conversation_id, counters, problems)
    for event in events:
        version = event.originator_version
        recount.check(conversation, event)
        try:
            conversation = Conversation.apply(conversation, event)
        except (ContextLedgerError, ValueError, KeyError, IndexError) as exc:
            unchecked = sorted(v for v in snapshots if version <= v <= last_version)
            cannot = f"the snapshots at versions {unchecked} cannot be checked" if unchecked else ""
            if isinstance(exc, LogDamagedError) and exc.version == version:  # a gap, reported
                if cannot:
                    problems.append(VerifyProblem(conversation_id, version, cannot + " (events are missing)"))
                break
            said = exc.message if isinstance(exc, ContextLedgerError) else f"{type(exc).__name__}: {exc}"
            problems.append(
                VerifyProblem(
                    conversation_id,
                    version,
                    f"the events do not fold from here ({said})" + (f"; {cannot}" if cannot else ""),
                )
            )
            break
        stored = snapshots.get(version)
        if stored is not None:
            _compare(log, conversation, stored, problems)
    return problems


def _compare(
    log: StoredLog, conversation: Conversation, stored: StoredEvent, problems: list[VerifyProblem]
) -> None:
    """A problem if the snapshot stored at the conversation's version is not its fold.
    The fold's own snapshot is encoded first: the same bytes as the stored one's once
    decrypted (the common case) need no decoding; otherwise the stored one is decoded
    and compared field by field."""
    cid, version = conversation.id, conversation.version
    stored_bytes = log.stored_plain(stored)
    if stored_bytes is not None and stored_bytes == log.plain(ConversationSnapshot.take(conversation)):
        return
    try:
        snapshot = log.decode(stored)
    except ContextLedgerError as exc:
        problems.append(VerifyProblem(cid, version, f"undecodable snapshot: {exc.message}"))
        return
    if not isinstance(snapshot, ConversationSnapshot):
        problems.append(VerifyProblem(cid, version, "the snapshot is not a conversation's snapshot"))
        return
    folded, kept = conversation.state, snapshot.state
    differ = [n for n in sorted(kept.model_fields_set) if _differs(getattr(folded, n), getattr(kept, n))]
    if differ:
        problems.append(
            VerifyProblem(
                cid,
                version,
                f"the snapshot at version {version} does not match the events it stands for "
                f"(it differs in {', '.join(differ)})",
            )
        )


def _differs(folded: object, stored: object) -> bool:
    """Whether a stored value is not the folded one. Only the fields a stored model
    holds are compared: a field added to the state after the snapshot was written
    reads as its default, which is no sign of tampering."""
    if isinstance(stored, BaseModel):
        return type(folded) is not type(stored) or any(
            _differs(getattr(folded, name), getattr(stored, name)) for name in stored.model_fields_set
        )
    if isinstance(stored, (list, tuple)):
        return (
            not isinstance(folded, (list, tuple))
            or len(folded) != len(stored)
            or any(_differs(a, b) for a, b in zip(folded, stored, strict=True))
        )
    return folded != stored


class _Recount:
    """Token counts recomputed with the conversation's counter, event by event."""

    def __init__(
        self, conversation_id: UUID, counters: TokenCounters | None, problems: list[VerifyProblem]
    ) -> None:
        self.conversation_id = conversation_id
        self.counters = counters
        self.problems = problems

    def check(self, before: Conversation | None, event: ConversationEvent) -> None:
        """Recount ``event``'s token counts (``before``: the conversation it follows)."""
        counters = self.counters
        if counters is None:
            return
        if isinstance(event, Started):
            self._system(counters, event, event.model, event.system_prompt, event.system_tokens)
            self._same(
                event,
                "the tool definitions' tokens",
                event.tools_tokens,
                counters.tools_cost(event.model, event.tools),
            )
            return
        if before is None:
            return
        model = before.state.model
        if isinstance(event, MessageAppended):
            tokens, placeholder = counters.message_cost(before, event.message)
            self._same(event, f"message {event.position}'s tokens", event.tokens, tokens)
            self._same(
                event, f"message {event.position}'s placeholder tokens", event.placeholder_tokens, placeholder
            )
        elif isinstance(event, MessageEdited):
            counter = counters.for_model(model)
            tokens = counter.count_message(event.message)
            self._same(event, f"the edit of {event.position}: its tokens", event.tokens, tokens)
            old = next((e for e in before.state.window if e.position == event.position), None)
            if old is not None:
                self._same(
                    event,
                    f"the edit of {event.position}: the replaced message's tokens",
                    event.replaced_tokens,
                    old.tokens,
                )
                if event.message.role == "tool":
                    text = placeholder_text(old.tool_name, tokens, event.position)
                    placeholder = counter.count_message(
                        Message(role="tool", tool_call_id=event.message.tool_call_id, content=text)
                    )
                    self._same(
                        event,
                        f"the edit of {event.position}: its placeholder tokens",
                        event.placeholder_tokens,
                        placeholder,
                    )
        elif isinstance(event, SystemPromptChanged):
            self._system(counters, event, model, event.system_prompt, event.system_tokens)
        elif isinstance(event, ToolsChanged):
            self._same(
                event,
                "the tool definitions' tokens",
                event.tools_tokens,
                counters.tools_cost(model, event.tools),
            )
        elif isinstance(event, SummaryCreated):
            counter = counters.for_model(model)
            start = 0 if before.previous_summary_text() is not None else event.from_position
            rendered = summary_message(start, event.through_position, event.text)
            what = f"the summary of {event.from_position}-{event.through_position}"
            self._same(event, f"{what}: its tokens", event.tokens, counter.count_text(event.text))
            self._same(
                event, f"{what}: its message tokens", event.message_tokens, counter.count_message(rendered)
            )

    def _system(
        self, counters: TokenCounters, event: ConversationEvent, model: str, prompt: str | None, stored: int
    ) -> None:
        counted = 0
        if prompt is not None:
            counted = counters.for_model(model).count_message(Message(role="system", content=prompt))
        self._same(event, "the system prompt's tokens", stored, counted)

    def _same(self, event: ConversationEvent, what: str, stored: Any, counted: Any) -> None:
        if stored != counted:
            self.problems.append(
                VerifyProblem(
                    self.conversation_id,
                    event.originator_version,
                    f"{what} ({stored}) are not what they count ({counted})",
                )
            )
