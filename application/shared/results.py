"""Typed, frozen results of the ledger's queries."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from contextledger.application.shared.counting import relative_error
from contextledger.application.shared.wire import ContextMessage
from contextledger.domain.conversation import Conversation
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.events import (
    DomainEvent,
    Forked,
    MessageAppended,
    MessageEdited,
    SummaryCreated,
)
from contextledger.domain.folding.queries import reported_offset

__all__ = [
    "AuditEvent",
    "SharedHistory",
    "SummaryInfo",
    "TokenTotals",
    "TranscriptEntry",
    "TranscriptVersion",
    "VerifyProblem",
    "VerifyReport",
    "WorkingMemory",
]


@dataclass(frozen=True)
class WorkingMemory:
    """The context at one version, with what its prompt costs: one consistent read.
    ``messages`` are typed as ``context()``'s (the openai SDK's request messages).
    ``tokens`` is ``TokenTotals.context_tokens`` at that version (the provider's
    reported count of the prefix it saw, where a reply reported one, plus our count
    of the rest), ``estimate_error_bound`` how far it may be from the provider's
    count (``TokenTotals.estimate_error_bound``: 0 for a model counted exactly)."""

    messages: list[ContextMessage]
    tokens: int
    version: int
    estimate_error_bound: int = 0


def calibrated_tokens(conversation: Conversation, estimate: int) -> tuple[int, int]:
    """What a prompt our counter puts at ``estimate`` costs, and the bound on that
    figure's error: where a reply reported the provider's count of the prefix it saw,
    that count plus our estimate of what came after (only the latter estimated)."""
    s = conversation.state
    offset = reported_offset(s)
    bound = relative_error(s.model)
    estimated_part = estimate if offset is None else estimate - s.reported_estimate_tokens
    error_bound = math.ceil(bound * max(0, estimated_part)) if bound else 0
    return estimate + (offset or 0), error_bound


@dataclass(frozen=True)
class TranscriptEntry:
    """One message as it was appended.

    ``Ledger.transcript()`` gives a ``TranscriptVersion`` (a subclass with the marks
    below as fields) where an edit, a retraction or a fork concerns the entry; here
    the marks read as unmarked (the read models store exactly these fields).
    """

    position: int
    version: int
    tokens: int
    message: dict[str, Any]
    timestamp: datetime
    digest: str
    client_message_id: str | None = None

    @property
    def retracted(self) -> bool:
        """Whether the message was retracted (see ``TranscriptVersion``)."""
        return False

    @property
    def retracted_version(self) -> int | None:
        return None

    @property
    def retracted_reason(self) -> str | None:
        return None

    @property
    def edited_from_version(self) -> int | None:
        return None

    @property
    def superseded_by_version(self) -> int | None:
        return None

    @property
    def inherited_from(self) -> UUID | None:
        return None

    @property
    def current(self) -> bool:
        """Whether this version is what the conversation holds now at its position."""
        return not self.retracted and self.superseded_by_version is None

    @classmethod
    def from_event(cls, event: MessageAppended | MessageEdited) -> TranscriptEntry:
        if isinstance(event, MessageEdited):
            return TranscriptVersion(
                position=event.position,
                version=event.originator_version,
                tokens=event.tokens,
                message=event.message.to_openai(),
                timestamp=event.timestamp,
                digest=event.digest,
                edited_from_version=event.replaces_version,
            )
        return cls(
            position=event.position,
            version=event.originator_version,
            tokens=event.tokens,
            message=event.message.to_openai(),
            timestamp=event.timestamp,
            digest=event.digest,
            client_message_id=event.client_message_id,
        )

    def marked(self, **changes: Any) -> TranscriptVersion:
        """A ``TranscriptVersion`` of this entry with the given marks."""
        base = {f: getattr(self, f) for f in _MARKS if f not in changes}
        return TranscriptVersion(
            position=self.position,
            version=self.version,
            tokens=self.tokens,
            message=self.message,
            timestamp=self.timestamp,
            digest=self.digest,
            client_message_id=self.client_message_id,
            **base,
            **changes,
        )


_MARKS = (
    "retracted",
    "retracted_version",
    "retracted_reason",
    "edited_from_version",
    "superseded_by_version",
    "inherited_from",
)


@dataclass(frozen=True)
class TranscriptVersion(TranscriptEntry):
    """A transcript entry an edit, a retraction or a fork concerns.

    ``retracted`` marks a message taken out of the working memory (at
    ``retracted_version``, with the reason given in ``retracted_reason``); an edited
    version names the version it replaced in ``edited_from_version``, and a replaced
    one the version that replaced it in ``superseded_by_version``. In a fork, entries
    of the shared history carry the source's id in ``inherited_from`` (their versions
    are the source's).
    """

    retracted: bool = False
    retracted_version: int | None = None
    retracted_reason: str | None = None
    edited_from_version: int | None = None
    superseded_by_version: int | None = None
    inherited_from: UUID | None = None


@dataclass(frozen=True)
class SummaryInfo:
    """A recorded summary with its range and provenance.

    ``from_position``..``through_position`` are the messages it newly covers;
    ``covers_from`` is the first position it stands for (0 when it re-folds the
    previous summary, as in single mode). ``valid`` is False once a retraction or an
    edit of a message it was made from invalidated it (``invalidated_version``: the
    ``SummaryInvalidated`` event's version; ``invalidated_reason``: why).

    A fork lists the summaries of the history it shares first, marked
    ``inherited_from``: the conversation whose log holds the summary (its ``version``
    is a version of that log). ``invalidated_in`` names the conversation whose
    ``SummaryInvalidated`` took a summary back (``invalidated_version`` is a version
    of that log): a fork's own edit can take back a summary it inherited.
    """

    from_position: int
    through_position: int
    covers_from: int
    text: str
    tokens: int
    model: str
    prompt_version: str
    input_tokens: int | None
    output_tokens: int | None
    latency_ms: float
    policy_version: int
    version: int
    timestamp: datetime
    source_digest: str
    valid: bool = True
    invalidated_version: int | None = None
    invalidated_reason: str | None = None
    #: Set on a fork's inherited summaries: the conversation whose log holds it.
    inherited_from: UUID | None = None
    #: The conversation whose ``SummaryInvalidated`` took it back (None while valid).
    invalidated_in: UUID | None = None
    #: The provider format of a compaction the provider made (``"responses"``,
    #: ``"anthropic"``); None for contextledger's own summaries.
    native: str | None = None
    #: A native compaction's own items or blocks, exactly as the provider gave them
    #: (None for contextledger's own summaries).
    payload: tuple[dict[str, Any], ...] | None = None

    @classmethod
    def from_event(cls, event: SummaryCreated) -> SummaryInfo:
        p = event.provenance
        return cls(
            from_position=event.from_position,
            through_position=event.through_position,
            covers_from=event.covers_from,
            text=event.text,
            tokens=event.tokens,
            model=p.model,
            prompt_version=p.prompt_version,
            input_tokens=p.input_tokens,
            output_tokens=p.output_tokens,
            latency_ms=p.latency_ms,
            policy_version=event.policy_version,
            version=event.originator_version,
            timestamp=event.timestamp,
            source_digest=event.source_digest,
            native=event.native,
            payload=event.payload,
        )


@dataclass(frozen=True)
class TokenTotals:
    """Token accounting for one conversation (or all of them, summed).

    ``context_tokens`` is what the prompt of ``context()`` costs as the OpenAI API
    counts it; ``full_history_tokens`` what sending every current message (retracted
    ones out, edited ones in their newest version) would cost; ``saved_tokens`` the
    difference. ``messages`` counts every position ever appended, retracted or not.
    """

    messages: int
    appended_tokens: int
    context_tokens: int
    full_history_tokens: int
    saved_tokens: int
    summaries: int
    summarizer_calls: int
    summarizer_failures: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    provider_prompt_tokens: int = 0
    provider_completion_tokens: int = 0
    conversations: int = 1
    #: Our estimate of the prompts whose usage the provider reported (``record_usage``,
    #: or a ``ChatCompletion`` appended): compare it with ``provider_prompt_tokens``.
    estimated_prompt_tokens: int = 0
    #: How many model calls had their usage recorded.
    usage_records: int = 0
    #: What the tool definitions add to every prompt (included in ``context_tokens``).
    tools_tokens: int = 0
    #: The conversation's key, if it was started with one (None for sums).
    key: str | None = None

    @property
    def estimate_error(self) -> int:
        """``estimated_prompt_tokens - provider_prompt_tokens`` over the recorded calls."""
        return self.estimated_prompt_tokens - self.provider_prompt_tokens

    #: Messages retracted, and edits made (each edit counts once).
    retracted_messages: int = 0
    edited_messages: int = 0
    summaries_invalidated: int = 0
    #: How far ``context_tokens`` may be from the provider's count: 0 for a model
    #: counted exactly (tiktoken, OpenAI models); for one counted by estimate (Claude,
    #: Gemini), the stated relative bound (``counting.ESTIMATE_ERRORS``) of the part
    #: that is estimated. Where a reply reported the provider's count of the prompt,
    #: ``context_tokens`` is that count plus our estimate of what came after, and only
    #: the latter is estimated.
    estimate_error_bound: int = 0
    #: Of ``provider_prompt_tokens`` (which includes them), the input tokens read from
    #: the provider's prompt cache and those written to it, as the replies reported.
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    #: Of the model calls whose usage was recorded, those whose context a standing
    #: summary served (the reduction's cache hits), and those made while a range over
    #: the trigger waited for a new summary (its misses).
    reduction_hits: int = 0
    reduction_misses: int = 0

    @property
    def uncached_prompt_tokens(self) -> int:
        """The reported prompt tokens neither read from nor written to the cache."""
        return self.provider_prompt_tokens - self.cache_read_tokens - self.cache_creation_tokens

    @classmethod
    def of(cls, conversation: Conversation) -> TokenTotals:
        """The totals of one conversation, from its state."""
        s = conversation.state
        context_tokens, error_bound = calibrated_tokens(conversation, conversation.context_tokens())
        full = conversation.full_history_tokens + s.live_tokens_delta
        return cls(
            messages=s.next_position - s.erased_before,
            appended_tokens=s.appended_tokens,
            context_tokens=context_tokens,
            full_history_tokens=full,
            saved_tokens=max(0, full - context_tokens),
            summaries=s.summaries_created + s.inherited_summaries,
            summarizer_calls=s.summarizer_calls,
            summarizer_failures=s.summarizer_failures,
            summarizer_input_tokens=s.summarizer_input_tokens,
            summarizer_output_tokens=s.summarizer_output_tokens,
            provider_prompt_tokens=s.provider_prompt_tokens,
            provider_completion_tokens=s.provider_completion_tokens,
            estimated_prompt_tokens=s.provider_estimated_prompt_tokens,
            usage_records=s.usage_records,
            tools_tokens=s.tools_tokens,
            key=s.key,
            retracted_messages=s.retracted_messages,
            edited_messages=s.edited_messages,
            summaries_invalidated=s.summaries_invalidated,
            estimate_error_bound=error_bound,
            cache_read_tokens=s.provider_cache_read_tokens,
            cache_creation_tokens=s.provider_cache_creation_tokens,
            reduction_hits=s.reduction_hits,
            reduction_misses=s.reduction_misses,
        )

    @classmethod
    def sum(cls, totals: list[TokenTotals], shared: Iterable[SharedHistory] = ()) -> TokenTotals:
        """Totals added up over conversations. ``shared``: what forks among them
        inherited from their sources, taken off so each stored message (and each
        retraction or edit of it) counts once."""
        sums: dict[str, Any] = {k: 0 for k, v in vars(cls.zero()).items() if isinstance(v, int)}
        for one in totals:
            for name in sums:
                sums[name] += int(getattr(one, name))
        for inherited in shared:
            sums["messages"] -= inherited.messages
            sums["appended_tokens"] -= inherited.appended_tokens
            sums["retracted_messages"] -= inherited.retracted_messages
            sums["edited_messages"] -= inherited.edited_messages
            sums["summaries"] -= inherited.summaries
        return cls(**sums)

    @classmethod
    def zero(cls) -> TokenTotals:
        return cls(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, conversations=0)


@dataclass(frozen=True)
class SharedHistory:
    """What a fork holds of its source's history when it is made (its ``Forked``
    event's state): counted in the fork's own totals, left out of global sums."""

    messages: int
    appended_tokens: int
    retracted_messages: int
    edited_messages: int
    #: Summaries of the shared history (0 for forks recorded before they were counted).
    summaries: int = 0

    @classmethod
    def of(cls, event: Forked) -> SharedHistory:
        state = event.state
        return cls(
            messages=int(state.get("next_position", 0)),
            appended_tokens=int(state.get("appended_tokens", 0)),
            retracted_messages=int(state.get("retracted_messages", 0)),
            edited_messages=int(state.get("edited_messages", 0)),
            summaries=int(state.get("inherited_summaries", 0)),
        )


@dataclass(frozen=True)
class AuditEvent:
    """One stored event, as ``replay`` shows it (``record()`` as ``export`` writes it)."""

    version: int
    timestamp: datetime
    kind: str
    data: dict[str, Any]
    topic: str = ""
    conversation_id: UUID | None = None

    @classmethod
    def from_event(cls, event: DomainEvent | ErasedEvent) -> AuditEvent:
        if isinstance(event, ErasedEvent):  # its content is gone: what is left of it
            return cls(
                version=event.originator_version,
                timestamp=event.erased_at,
                kind="Erased",
                data={"subject": event.subject, "reason": event.reason},
                topic=event.topic,
                conversation_id=event.originator_id,
            )
        return cls(
            version=event.originator_version,
            timestamp=event.timestamp,
            kind=type(event).__name__,
            data=event.model_dump(mode="json", exclude={"originator_id", "originator_version", "timestamp"}),
            topic=type(event).TOPIC,
            conversation_id=event.originator_id,
        )

    def record(self) -> dict[str, Any]:
        """The JSON-ready export record of this event."""
        return {
            "originator_id": str(self.conversation_id),
            "version": self.version,
            "timestamp": self.timestamp.isoformat(),
            "topic": self.topic,
            "kind": self.kind,
            "data": self.data,
        }


@dataclass(frozen=True)
class VerifyProblem:
    conversation_id: UUID
    version: int
    problem: str


@dataclass(frozen=True)
class VerifyReport:
    """What ``verify`` found. ``ok`` is False if any stored event was altered."""

    conversations: int
    events: int
    messages: int
    summaries: int
    problems: tuple[VerifyProblem, ...] = field(default_factory=tuple)
    #: Conversations whose content was erased (crypto-shredded): their content is not
    #: verifiable, which is not a problem.
    erased: tuple[UUID, ...] = ()
    #: Of ``erased``, those whose structure their erasure recorded, and which verify
    #: checked: the erased records against the store, their order, times, positions and
    #: summaries' ranges, and the digest chain over their commitments (the others were
    #: erased before erasures recorded it).
    erased_checked: tuple[UUID, ...] = ()
    #: Forks whose inherited history was erased with their source's data subject:
    #: their own records are verified where they can be, the rest is in ``unverified``.
    partly_erased: tuple[UUID, ...] = ()
    #: What could not be verified, and why (not a problem): a fork's erased records,
    #: and the first link of its digest chain after them ("not verifiable past the
    #: erasure": it continues a digest that was erased).
    unverified: tuple[VerifyProblem, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems
