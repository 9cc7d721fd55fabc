"""The shape every read model shares: the projection base, the view ports, the records.

A data subject's erasure (``ContentErased``) is followed by every built-in read
model: its view deletes the rows of the erased conversations (``erase_rows``). The
records of an erased conversation read as ``ErasedEvent`` and change nothing.

A projection has a ``name`` (its tracking key and the name ``rebuild`` takes) and the
``topics`` it follows, and maps each domain event to calls of its *view*, passing the
event's position in the log (an eventsourcing ``Tracking``). A view writes its change
and its tracking row in one transaction and ignores an event whose notification id is
not above the tracked one, so every event changes a read model exactly once, whoever
applies it and however often.

The views are ports (``Protocol`` classes); ``contextledger.infrastructure.readmodels``
implements them on SQLAlchemy tables. Users add their own projections the same way:
subclass ``ReadModelProjection``, give it a ``name`` and ``topics``, map events to
calls of a view that records ``Tracking`` atomically with its change.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Protocol, runtime_checkable
from uuid import UUID

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking
from eventsourcing.projection import Projection
from typing_extensions import TypeVar

from contextledger.application.shared.results import SummaryInfo, TranscriptEntry
from contextledger.domain.erasure import ContentErased

__all__ = [
    "ConversationRecord",
    "ConversationsView",
    "ReadModelProjection",
    "ReadModelView",
    "SummariesView",
    "TokenTotalsRecord",
    "TokenTotalsView",
    "TranscriptView",
    "ViewT",
]


# ---------------------------------------------------------------------- records


@dataclass(frozen=True)
class TokenTotalsRecord:
    """Token accounting as the ``token_totals`` read model holds it.

    Per conversation (``conversation_id`` set, ``conversations == 1``) or summed over
    all of them (``conversation_id`` None). ``context_tokens`` is not here: what the
    next prompt costs depends on the working window, which ``Ledger.totals()`` computes.
    The fields mean what ``TokenTotals``' fields of the same names mean: a fork's row
    counts the history it shares with its source, the global sum counts it once.
    """

    conversation_id: UUID | None
    conversations: int
    messages: int
    appended_tokens: int
    full_history_tokens: int
    summaries: int
    summarizer_calls: int
    summarizer_failures: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    provider_prompt_tokens: int
    provider_completion_tokens: int
    estimated_prompt_tokens: int = 0
    usage_records: int = 0
    #: Summed over conversations in the global totals.
    tools_tokens: int = 0
    key: str | None = None
    retracted_messages: int = 0
    edited_messages: int = 0
    summaries_invalidated: int = 0
    #: Of ``provider_prompt_tokens``, the input tokens the replies reported read from
    #: the provider's prompt cache and written to it.
    cache_read_tokens: int = 0
    cache_creation_tokens: int = 0
    #: Model calls a standing summary served, and those made while one was pending.
    reduction_hits: int = 0
    reduction_misses: int = 0

    @property
    def estimate_error(self) -> int:
        """``estimated_prompt_tokens - provider_prompt_tokens`` over the recorded calls."""
        return self.estimated_prompt_tokens - self.provider_prompt_tokens

    @property
    def uncached_prompt_tokens(self) -> int:
        """The reported prompt tokens neither read from nor written to the cache."""
        return self.provider_prompt_tokens - self.cache_read_tokens - self.cache_creation_tokens


@dataclass(frozen=True)
class ConversationRecord:
    """One row of the ``conversations`` read model.

    ``messages`` counts every position the conversation holds (a fork: its shared
    history too); ``forked_from``/``forked_at_version`` name a fork's source and the
    source's version it was forked at; ``system_prompt_version`` is the version of the
    last system prompt change (None: never changed).
    """

    conversation_id: UUID
    model: str
    started_at: datetime
    updated_at: datetime
    last_version: int
    messages: int
    summaries: int
    policy_version: int
    key: str | None = None
    forked_from: UUID | None = None
    forked_at_version: int | None = None
    system_prompt_version: int | None = None


@runtime_checkable
class ReadModelView(Protocol):
    """What every view does besides its own changes (eventsourcing's TrackingRecorder)."""

    def insert_tracking(self, tracking: Tracking) -> None:
        """Record that the event at ``tracking`` was seen, changing nothing else."""
        ...

    def max_tracking_id(self, application_name: str) -> int | None:
        """The last notification id applied (None: nothing yet)."""
        ...

    def reset(self) -> None:
        """Drop and recreate the view's tables and reset its tracking (for rebuilds)."""
        ...


@runtime_checkable
class TranscriptView(ReadModelView, Protocol):
    """Every message ever appended and every edited version, per conversation, with
    the marks ``Ledger.transcript()`` shows (a fork: its shared history first)."""

    def add_message(self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking) -> None: ...

    def edit_message(self, entry: TranscriptEntry, *, conversation_id: UUID, tracking: Tracking) -> None:
        """Mark the current version at ``entry.position`` replaced; add ``entry``."""
        ...

    def retract_messages(
        self,
        conversation_id: UUID,
        positions: tuple[int, ...],
        *,
        version: int,
        reason: str | None,
        tracking: Tracking,
    ) -> None:
        """Mark every version at ``positions`` retracted at ``version``."""
        ...

    def fork_transcript(
        self,
        conversation_id: UUID,
        *,
        source_id: UUID,
        source_version: int,
        through_position: int,
        tracking: Tracking,
    ) -> None:
        """Give a fork the source's rows through ``through_position`` as they stood
        at ``source_version``."""
        ...

    def transcript(self, conversation_id: UUID) -> list[TranscriptEntry]: ...


@runtime_checkable
class SummariesView(ReadModelView, Protocol):
    """Every summary recorded, with its range and provenance."""

    def add_summary(self, summary: SummaryInfo, *, conversation_id: UUID, tracking: Tracking) -> None: ...

    def invalidate_summaries(
        self,
        conversation_id: UUID,
        versions: tuple[int, ...],
        *,
        version: int,
        reason: str,
        tracking: Tracking,
        inherited: tuple[tuple[UUID, int], ...] = (),
    ) -> None:
        """Mark the summaries recorded at ``versions`` invalid (by the event at ``version``),
        and the inherited ones ``inherited`` names as (log that holds it, version)."""
        ...

    def fork_summaries(
        self, conversation_id: UUID, *, source_id: UUID, source_version: int, tracking: Tracking
    ) -> None:
        """Give a fork its source's summaries as they stood at ``source_version``."""
        ...

    def readable_summary(
        self,
        conversation_id: UUID,
        *,
        origin_id: UUID,
        version: int,
        text: str,
        tokens: int,
        tracking: Tracking,
    ) -> None:
        """Give the opaque native summary recorded at ``version`` in ``origin_id``'s log
        (as ``conversation_id`` holds it) the readable text made for it later."""
        ...

    def summaries(self, conversation_id: UUID) -> list[SummaryInfo]: ...


@runtime_checkable
class TokenTotalsView(ReadModelView, Protocol):
    """Token counters per conversation; global totals are their sum."""

    def start_totals(
        self,
        conversation_id: UUID,
        *,
        base_tokens: int,
        tracking: Tracking,
        system_tokens: int = 0,
        tools_tokens: int = 0,
        key: str | None = None,
        **counters: int,
    ) -> None:
        """A row for a new conversation; ``base_tokens``: system prompt and reply
        priming (``system_tokens`` of it the system prompt's); ``counters``: starting
        values (a fork's shared history)."""
        ...

    def set_in_totals(
        self,
        conversation_id: UUID,
        *,
        tracking: Tracking,
        system_tokens: int | None = None,
        tools_tokens: int | None = None,
    ) -> None:
        """Replace the system prompt's or the tool definitions' tokens."""
        ...

    def add_to_totals(self, conversation_id: UUID, *, tracking: Tracking, **increments: int) -> None:
        """Add ``increments`` (column name -> amount) to the conversation's counters."""
        ...

    def totals(self, conversation_id: UUID) -> TokenTotalsRecord | None: ...

    def global_totals(self) -> TokenTotalsRecord: ...


@runtime_checkable
class ConversationsView(ReadModelView, Protocol):
    """The list of conversations."""

    def add_conversation(
        self,
        conversation_id: UUID,
        *,
        model: str,
        started_at: datetime,
        tracking: Tracking,
        key: str | None = None,
        messages: int = 0,
        forked_from: UUID | None = None,
        forked_at_version: int | None = None,
        policy_version: int = 1,
        summaries: int = 0,
    ) -> None: ...

    def update_conversation(
        self,
        conversation_id: UUID,
        *,
        version: int,
        at: datetime,
        tracking: Tracking,
        messages: int = 0,
        summaries: int = 0,
        policy_version: int | None = None,
        system_prompt_version: int | None = None,
    ) -> None:
        """Move ``last_version``/``updated_at`` on and add to the counters."""
        ...

    def conversations(self) -> list[ConversationRecord]: ...


# ------------------------------------------------------------------ projection


#: The view a projection writes to (``ReadModelProjection[TranscriptView]``).
ViewT = TypeVar("ViewT", bound=ReadModelView, default=ReadModelView, covariant=True)


class ReadModelProjection(Projection[Any], Generic[ViewT]):
    """Base of the built-in read models: eventsourcing's ``Projection`` shape.

    ``process_event(event, tracking)`` maps one domain event to view calls; events of
    the projection's topics that change nothing still record their tracking. The type
    parameter names the view's port, so ``self.view`` is typed.
    """

    name = "read_model"
    topics: tuple[str, ...] = ()

    def __init__(self, view: ViewT) -> None:
        super().__init__(view)

    @property
    def view(self) -> ViewT:
        """The view this projection writes to."""
        return self._view  # type: ignore[no-any-return]

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    def erase_rows(self, event: ContentErased, tracking: Tracking) -> None:
        """A data subject was erased: the view deletes what it holds for the
        conversations ``event`` names (``erase_conversations(ids, tracking=...)``); a
        view without that method keeps its rows (and records the tracking)."""
        erase = getattr(self.view, "erase_conversations", None)
        if erase is None:
            self.view.insert_tracking(tracking)
        else:
            erase(event.erased, tracking=tracking)
