"""The state of a ``Conversation`` and the fold that builds it from events.

State is bounded by the unsummarized window: counters, the current summaries, the
pending range and the unsummarized messages. History lives only in the log. The
functions below the fold read the state (what the view shows, what it costs).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from contextledger.domain.events import (
    ConversationEvent,
    MessageAppended,
    PolicyChanged,
    Started,
    SummarizationFailed,
    SummaryCreated,
    ThresholdReached,
    UsageRecorded,
)
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.reduction import Entry, SummaryLayer

__all__ = [
    "ConversationState",
    "PendingRange",
    "apply_event",
    "fixed_tokens",
    "initial_state",
    "is_placeholder",
    "layers_after",
    "newest_group_tokens",
    "view_tokens",
    "visible_entries",
]


class PendingRange(BaseModel):
    """A pinned range waiting for its summary (set by ThresholdReached)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    threshold_version: int
    from_position: int
    through_position: int
    from_version: int
    through_version: int
    consolidate: bool = False
    attempts: int = 0


class ConversationState(BaseModel):
    """Everything the aggregate knows. Snapshots store exactly this."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False)

    system_prompt: str | None
    system_tokens: int
    model: str
    policy: ReductionPolicy
    policy_version: int = 1
    reply_priming: int = 3
    next_position: int = 0
    appended_tokens: int = 0
    digest: str
    summarized_through: int = -1
    summaries: list[SummaryLayer] = Field(default_factory=list)
    window: list[Entry] = Field(default_factory=list)
    #: Unanswered call ids of the current tool-call group (empty: no group open).
    open_calls: list[str] = Field(default_factory=list)
    #: Function names by call id for the current group (names tool placeholders).
    group_calls: dict[str, str] = Field(default_factory=dict)
    #: Index in ``window`` of the open group's assistant message.
    open_group_index: int | None = None
    pending: PendingRange | None = None
    #: Tool results before this position are shown as placeholders.
    placeholder_before: int = 0
    #: Window messages before this position are left out of the view (the cap).
    dropped_before: int = 0
    summaries_created: int = 0
    summarizer_calls: int = 0
    summarizer_failures: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    provider_prompt_tokens: int = 0
    provider_completion_tokens: int = 0


def initial_state(event: Started) -> ConversationState:
    """The state a ``Started`` event begins."""
    return ConversationState(
        system_prompt=event.system_prompt,
        system_tokens=event.system_tokens,
        model=event.model,
        policy=event.policy,
        reply_priming=event.reply_priming,
        digest=event.digest,
    )


def apply_event(s: ConversationState, event: ConversationEvent) -> None:
    """Fold one event (after ``Started``) into the state, in place."""
    if isinstance(event, MessageAppended):
        _apply_message(s, event)
    elif isinstance(event, ThresholdReached):
        s.pending = PendingRange(
            threshold_version=event.originator_version,
            from_position=event.from_position,
            through_position=event.through_position,
            from_version=event.from_version,
            through_version=event.through_version,
            consolidate=event.consolidate,
        )
    elif isinstance(event, SummaryCreated):
        _apply_summary(s, event)
    elif isinstance(event, SummarizationFailed):
        if s.pending is not None:
            s.pending = s.pending.model_copy(update={"attempts": event.attempt})
        s.summarizer_failures += 1
        if event.called_provider:
            s.summarizer_calls += 1
            s.summarizer_input_tokens += event.input_tokens or 0
            s.summarizer_output_tokens += event.output_tokens or 0
    elif isinstance(event, PolicyChanged):
        s.policy = event.policy
        s.policy_version = event.policy_version
        refresh_view(s)
    elif isinstance(event, UsageRecorded):
        s.provider_prompt_tokens += event.prompt_tokens
        s.provider_completion_tokens += event.completion_tokens


def _apply_message(s: ConversationState, event: MessageAppended) -> None:
    message = event.message
    tool_name = None
    if message.role == "tool":
        tool_name = s.group_calls.get(message.tool_call_id or "")
        s.open_calls.remove(message.tool_call_id or "")
    else:
        s.group_calls = {}
        s.open_calls = []
        s.open_group_index = None
    s.window.append(
        Entry(
            position=event.position,
            version=event.originator_version,
            message=message,
            tokens=event.tokens,
            placeholder_tokens=event.placeholder_tokens,
            tool_name=tool_name,
            items=event.items,
        )
    )
    if message.tool_calls:
        s.group_calls = {c.id: c.function.name for c in message.tool_calls}
        s.open_calls = [c.id for c in message.tool_calls]
        s.open_group_index = len(s.window) - 1
    elif message.role == "tool" and not s.open_calls:
        s.open_group_index = None
    s.next_position = event.position + 1
    s.appended_tokens += event.tokens
    s.digest = event.digest
    if s.open_group_index is None:
        refresh_view(s)


def _apply_summary(s: ConversationState, event: SummaryCreated) -> None:
    pending = s.pending
    layers = layers_after(
        s, pending, event.from_position, event.through_position, event.text, event.message_tokens
    )
    s.summaries = layers
    s.summarized_through = event.through_position
    cut = 0
    while cut < len(s.window) and s.window[cut].position <= event.through_position:
        cut += 1
    s.window = s.window[cut:]
    if s.open_group_index is not None:
        s.open_group_index -= cut
    s.pending = None
    s.summaries_created += 1
    s.summarizer_calls += 1
    s.summarizer_input_tokens += event.provenance.input_tokens or 0
    s.summarizer_output_tokens += event.provenance.output_tokens or 0
    # A summary changes the prefix anyway: the cap's batches start afresh.
    s.dropped_before = event.through_position + 1
    s.placeholder_before = max(s.placeholder_before, event.through_position + 1)
    refresh_view(s)


def layers_after(
    s: ConversationState,
    pending: PendingRange | None,
    from_position: int,
    through_position: int,
    text: str,
    message_tokens: int,
) -> list[SummaryLayer]:
    single = s.policy.summary_mode == "single" or (pending is not None and pending.consolidate)
    if single:
        return [
            SummaryLayer(
                from_position=0,
                through_position=through_position,
                text=text,
                message_tokens=message_tokens,
            )
        ]
    return [
        *s.summaries,
        SummaryLayer(
            from_position=from_position,
            through_position=through_position,
            text=text,
            message_tokens=message_tokens,
        ),
    ]


def is_placeholder(s: ConversationState, entry: Entry) -> bool:
    return (
        entry.message.role == "tool"
        and entry.position < s.placeholder_before
        and entry.placeholder_tokens is not None
    )


def fixed_tokens(s: ConversationState) -> int:
    system = s.system_tokens if s.system_prompt is not None else 0
    return s.reply_priming + system + sum(layer.message_tokens for layer in s.summaries)


def view_tokens(s: ConversationState, entries: list[Entry]) -> int:
    total = fixed_tokens(s)
    for entry in entries:
        total += (entry.placeholder_tokens or 0) if is_placeholder(s, entry) else entry.tokens
    return total


def newest_group_tokens(s: ConversationState, *, after: int) -> int:
    """Tokens of the newest closed group in the window with positions above ``after``."""
    end = s.open_group_index if s.open_group_index is not None else len(s.window)
    total = 0
    for index in range(end - 1, -1, -1):
        entry = s.window[index]
        if entry.position <= after:
            break
        total += entry.tokens
        if entry.starts_group:
            break
    return total


def refresh_view(s: ConversationState) -> None:
    """Move the placeholder and cap lines, in batches (hysteresis), never every turn."""
    keep = s.policy.keep_tool_results
    visible_end = s.open_group_index if s.open_group_index is not None else len(s.window)
    if keep is not None:
        full = [
            e
            for e in s.window[:visible_end]
            if e.message.role == "tool"
            and e.position >= s.placeholder_before
            and e.placeholder_tokens is not None
        ]
        if len(full) > 2 * keep:
            s.placeholder_before = full[-keep].position
    cap = s.policy.max_context_tokens
    if cap is None:
        return
    visible = [e for e in s.window[:visible_end] if e.position >= s.dropped_before]
    total = view_tokens(s, visible)
    if total <= cap:
        return
    fixed = fixed_tokens(s)
    low_water = cap - max(0, cap - fixed) // 4
    # Drop whole groups from the front until under the low-water mark, never the newest.
    starts = [i for i, e in enumerate(visible) if e.starts_group]
    if len(starts) < 2:
        return
    dropped_tokens = 0
    previous = 0
    for start in starts[1:]:
        dropped_tokens += view_tokens(s, visible[previous:start]) - fixed
        previous = start
        s.dropped_before = visible[start].position
        if total - dropped_tokens <= low_water:
            break


def visible_entries(s: ConversationState) -> list[Entry]:
    """Window entries the working memory shows (closed groups, not dropped)."""
    end = s.open_group_index if s.open_group_index is not None else len(s.window)
    return [e for e in s.window[:end] if e.position >= s.dropped_before]
