"""What is left of a fork whose inherited history was erased: its own part.

A fork given another data subject than its source's (``fork(src, subject="x")``)
holds two subjects' content: its first record (``Forked``, the inherited history)
and its summaries reaching back into that history are under the keys of both, its
own later records under its own subject's key alone. Erasing the source's subject
makes the first ones unreadable (``ErasedEvent``) and leaves the others readable:
the fork is then read as **its remainder**, what the fork itself appended.

``remainder_of`` sorts a conversation's stored records (None: not such a fork, or
nothing of its own is readable: the conversation reads as erased whole):

- the records holding inherited content are erased: the first record, and the
  summaries and invalidations under several keys (a readable one written before
  records could name several keys, whose window reaches into the inherited part,
  counts as erased too: it may repeat inherited text);
- of the readable records, those about the inherited part are left out of the
  remainder: edits and retractions of inherited positions, the ranges pinned for
  summaries reaching into it, and the tool results answering a call the inherited
  part made (their call is gone: sent alone they would be orphans, which the
  OpenAI API refuses);
- the positions before the first message the fork appended were inherited
  (``erased_before``): nothing is left of them. The positions of the tool results
  left out stay taken, as retracted ones (positions are never reused).

``fold_remainder`` folds the remainder into a ``Conversation``: no system prompt but
one the fork set itself, no tools or policy but its own (the model and the policy
the caller gives stand for the erased ones), the messages it appended in its
window. Each erased summary or invalidation counts as a summary invalidated: the
summaries then standing are dropped and the fork's own current messages reopened,
for the summarization policy to summarize again when its thresholds say so.

It reads a fork's log through the aggregate, so it sits above it, at the top of
the domain. May import: conversation, commands, folding, events, values.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from contextledger.domain.commands.edits import HistoryFold
from contextledger.domain.conversation import Conversation
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.events import (
    ConversationEvent,
    Forked,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    PolicyChanged,
    SummaryCreated,
    SummaryInvalidated,
    ThresholdReached,
    UsageRecorded,
)
from contextledger.domain.folding.fold import apply_event, refresh_view
from contextledger.domain.folding.state import ConversationState
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["ERASED_DIGEST", "Remainder", "fold_remainder", "remainder_of"]

#: Where a remainder's digest chain starts: the inherited digest it continued was
#: erased (its first own link cannot be checked).
ERASED_DIGEST = "erased"


@dataclass(frozen=True)
class Remainder:
    """A fork's records sorted after its inherited history was erased (module doc)."""

    #: The placeholder of the fork's first record.
    first: ErasedEvent
    #: The first position the fork appended itself: those before were inherited.
    erased_before: int
    #: Every stored record in order, those holding inherited content as placeholders.
    records: tuple[ConversationEvent | ErasedEvent, ...]
    #: The fork's own events about its own part, in order (a retraction that also
    #: named inherited positions narrowed to its own): what folds read.
    own: tuple[ConversationEvent, ...]

    @property
    def conversation_id(self) -> UUID:
        return self.first.originator_id

    @property
    def erased_versions(self) -> tuple[int, ...]:
        """The versions of the records that are erased (the first among them)."""
        return tuple(r.originator_version for r in self.records if isinstance(r, ErasedEvent))


def _placeholder(first: ErasedEvent, event: ConversationEvent) -> ErasedEvent:
    """A readable record that holds inherited content, shown as erased with the rest."""
    return ErasedEvent(
        originator_id=first.originator_id,
        originator_version=event.originator_version,
        topic=event.TOPIC,
        subject=first.subject,
        erased_at=first.erased_at,
        reason=first.reason,
        subjects=first.subjects,
    )


def _boundary(readable: list[ConversationEvent]) -> int:
    """The first position the fork appended; without a message of its own, the first
    past every position its records name (the inherited history's last one among
    them, when the fork restated its policy: ``PolicyChanged.inherited_through``)."""
    for event in readable:
        if isinstance(event, MessageAppended):
            return event.position
    named = [-1]
    for event in readable:
        if isinstance(event, PolicyChanged) and event.inherited_through is not None:
            named.append(event.inherited_through)
        elif isinstance(event, (ThresholdReached, UsageRecorded)):
            named.append(event.through_position)
        elif isinstance(event, MessageEdited):
            named.append(event.position)
        elif isinstance(event, MessagesRetracted):
            named.extend(event.positions)
    return max(named) + 1


def remainder_of(records: Sequence[Any]) -> Remainder | None:
    """The remainder of a fork whose first record is erased and some later ones are
    readable (None otherwise: see the module doc)."""
    if not records:
        return None
    first = records[0]
    if not (isinstance(first, ErasedEvent) and first.topic == Forked.TOPIC and first.originator_version == 1):
        return None
    readable = [r for r in records[1:] if isinstance(r, ConversationEvent)]
    if not readable:
        return None
    erased_before = _boundary(readable)
    shown: list[ConversationEvent | ErasedEvent] = [first]
    own: list[ConversationEvent] = []
    calls: set[str] = set()
    left_out: set[int] = set()
    tokens: dict[int, int] = {}
    for record in records[1:]:
        if not isinstance(record, ConversationEvent):
            shown.append(record)
            continue
        if isinstance(record, SummaryInvalidated) or (
            isinstance(record, SummaryCreated) and record.covers_from < erased_before
        ):
            shown.append(_placeholder(first, record))
            continue
        shown.append(record)
        kept: ConversationEvent | None = record
        if isinstance(record, MessageAppended):
            message = record.message
            if message.role == "tool":
                if message.tool_call_id not in calls:  # its call was inherited
                    kept = None
                    left_out.add(record.position)
            else:
                calls = {c.id for c in message.tool_calls or ()}
            if kept is not None:
                tokens[record.position] = record.tokens
        elif isinstance(record, MessageEdited):
            if record.position < erased_before or record.position in left_out:
                kept = None
            else:
                tokens[record.position] = record.tokens
        elif isinstance(record, MessagesRetracted):
            positions = tuple(p for p in record.positions if p in tokens)
            if not positions:
                kept = None
            elif positions != record.positions:
                kept = record.model_copy(
                    update={"positions": positions, "tokens": sum(tokens[p] for p in positions)}
                )
            for p in positions:
                tokens.pop(p, None)
        elif isinstance(record, ThresholdReached) and record.from_position < erased_before:
            kept = None
        if kept is not None:
            own.append(kept)
    return Remainder(first, erased_before, tuple(shown), tuple(own))


def fold_remainder(remainder: Remainder, *, model: str, policy: ReductionPolicy) -> Conversation:
    """The fork as its remainder (module doc); ``model`` and ``policy`` stand for the
    erased ones (a policy the fork changed itself replaces it)."""
    start = remainder.erased_before
    state = ConversationState(
        system_prompt=None,
        system_tokens=0,
        model=model,
        policy=policy,
        digest=ERASED_DIGEST,
        next_position=start,
        placeholder_before=start,
        dropped_before=start,
        erased_before=start,
        inherited_erased=True,
    )
    conversation = Conversation(remainder.conversation_id, remainder.first.timestamp)
    conversation.state = state
    conversation.version = 1
    own = {e.originator_version: e for e in remainder.own}
    messages = HistoryFold()
    for record in remainder.records[1:]:
        event = own.get(record.originator_version)
        if isinstance(record, ErasedEvent):
            _invalidate_all(state, messages)
        elif event is not None:
            apply_event(state, event)
            messages.apply(event)
        else:
            if isinstance(record, MessageAppended):  # a result whose call was inherited
                _leave_out(state, record.position)
            if isinstance(record, (MessageAppended, MessageEdited, MessagesRetracted)):
                state.digest = record.digest  # the chain goes on through what is left out
        conversation.version = record.originator_version
        conversation.modified_on = record.timestamp
    if state.pending is not None and _pinned_past_reopened(state):
        state.pending = None  # the policy pins the reopened messages first, at the next append
    return conversation


def _pinned_past_reopened(s: ConversationState) -> bool:
    """Whether the pending range was pinned while an erased summary still covered
    messages before it: those messages, reopened, come first (a range starts at the
    oldest unsummarized message); summarizing the range past them would leave them
    inside what a re-folding summary covers."""
    pending = s.pending
    if pending is None or not s.window or s.open_group_index == 0:
        return False
    return s.window[0].position < pending.from_position


def _leave_out(s: ConversationState, position: int) -> None:
    """A message the fork appended that its remainder leaves out: its position stays
    taken (positions are never reused), as a retracted one's."""
    s.next_position = max(s.next_position, position + 1)
    merged: list[tuple[int, int]] = []
    for a, b in sorted([*s.retracted, (position, position)]):
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    s.retracted = merged


def _invalidate_all(s: ConversationState, messages: HistoryFold) -> None:
    """An erased summary or invalidation: the summaries standing are dropped and the
    fork's own current messages reopened (counted as one summary invalidated)."""
    open_position = s.window[s.open_group_index].position if s.open_group_index is not None else None
    s.summaries = []
    s.summarized_through = -1
    s.window = messages.range(s.erased_before, s.next_position - 1)
    s.open_group_index = next((i for i, e in enumerate(s.window) if e.position == open_position), None)
    if s.open_group_index is None:
        s.open_calls = []
        s.group_calls = {}
    s.pending = None
    s.summaries_invalidated += 1
    if s.window:
        s.dropped_before = min(s.dropped_before, s.window[0].position)
    refresh_view(s)
