"""The fold of a ``Conversation``'s events into its state.

``initial_state`` begins the state from ``Started``; ``apply_event`` folds each later
event in place, and ``refresh_view`` moves the working memory's placeholder and cap
lines as the window grows. Appends are folded without passing over the window (the
running sums in ``contextledger.domain.folding.sums``).
"""

from __future__ import annotations

from bisect import bisect_left

from contextledger.domain.events import (
    ConversationEvent,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    NativeSummaryReadable,
    PolicyChanged,
    Started,
    SummarizationFailed,
    SummaryCreated,
    SummaryInvalidated,
    SystemPromptChanged,
    ThresholdReached,
    ToolsChanged,
    UsageRecorded,
)
from contextledger.domain.folding.budget import keep_offset, keep_scale, trigger_extra
from contextledger.domain.folding.queries import fixed_tokens, layers_after
from contextledger.domain.folding.state import ConversationState, PendingRange
from contextledger.domain.folding.sums import carry, entries_cost, full_tool_results, visible_sum, window_sums
from contextledger.domain.values.reduction import SummaryLayer, plan_range, trigger_limit

__all__ = ["apply_event", "initial_state", "refresh_view", "with_readable"]


def initial_state(event: Started) -> ConversationState:
    """The state a ``Started`` event begins."""
    return ConversationState(
        system_prompt=event.system_prompt,
        system_tokens=event.system_tokens,
        model=event.model,
        policy=event.policy,
        reply_priming=event.reply_priming,
        digest=event.digest,
        key=event.key,
        tools=event.tools,
        tools_tokens=event.tools_tokens,
    )


#: The events after which the prompt still begins with what a usage report covered.
_KEEPS_PREFIX = (MessageAppended, ThresholdReached, SummarizationFailed, UsageRecorded)


def apply_event(s: ConversationState, event: ConversationEvent) -> None:
    """Fold one event (after ``Started``) into the state, in place."""
    if s.reported_prompt_tokens is not None and not isinstance(event, _KEEPS_PREFIX):
        s.reported_prompt_tokens = None  # a summary, an edit, new tools...: another prefix
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
        if s.pending is not None and event.native is None:
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
        s.provider_estimated_prompt_tokens += event.estimated_prompt_tokens
        s.usage_records += 1
        s.provider_cache_read_tokens += event.cache_read_tokens or 0
        s.provider_cache_creation_tokens += event.cache_creation_tokens or 0
        if event.reduction == "hit":
            s.reduction_hits += 1
        elif event.reduction == "miss":
            s.reduction_misses += 1
        if event.calibrates:
            s.reported_prompt_tokens = event.prompt_tokens
            s.reported_estimate_tokens = event.estimated_prompt_tokens
            s.reported_cuts = (s.placeholder_before, s.dropped_before)
    elif isinstance(event, ToolsChanged):
        s.tools = event.tools
        s.tools_tokens = event.tools_tokens
        refresh_view(s)
    elif isinstance(event, MessagesRetracted):
        _apply_retraction(s, event)
    elif isinstance(event, MessageEdited):
        _apply_edit(s, event)
    elif isinstance(event, SystemPromptChanged):
        s.system_prompt = event.system_prompt
        s.system_tokens = event.system_tokens
        s.digest = event.digest
        refresh_view(s)
    elif isinstance(event, SummaryInvalidated):
        _apply_invalidation(s, event)
    elif isinstance(event, NativeSummaryReadable):
        s.summaries = with_readable(s.summaries, event)
        refresh_view(s)


def with_readable(layers: list[SummaryLayer], event: NativeSummaryReadable) -> list[SummaryLayer]:
    """``layers`` with the readable text ``event`` gives the opaque native summary it
    names (a layer whose text is still to be made)."""
    return [
        layer.model_copy(update={"text": event.text, "message_tokens": event.message_tokens})
        if layer.link is not None
        and layer.link.version == event.summary_version
        and layer.link.origin == event.summary_origin
        and not layer.text
        else layer
        for layer in layers
    ]


def _open_group_position(s: ConversationState) -> int | None:
    return s.window[s.open_group_index].position if s.open_group_index is not None else None


def _reindex(s: ConversationState, open_position: int | None) -> None:
    """Find the open group's assistant message again after the window changed."""
    if open_position is None:
        s.open_group_index = None
        return
    s.open_group_index = next((i for i, e in enumerate(s.window) if e.position == open_position), None)
    if s.open_group_index is None:  # the open group was retracted
        s.open_calls = []
        s.group_calls = {}


def _touches_pending(s: ConversationState, positions: tuple[int, ...] | list[int]) -> bool:
    p = s.pending
    return p is not None and any(p.from_position <= x <= p.through_position for x in positions)


def _apply_retraction(s: ConversationState, event: MessagesRetracted) -> None:
    gone = set(event.positions)
    open_position = _open_group_position(s)
    s.window = [e for e in s.window if e.position not in gone]
    _reindex(s, open_position)
    intervals = sorted([*s.retracted, *_intervals(sorted(gone))])
    merged: list[tuple[int, int]] = []
    for a, b in intervals:
        if merged and a <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    s.retracted = merged
    s.retracted_messages += len(gone)
    s.live_tokens_delta -= event.tokens
    s.digest = event.digest
    if _touches_pending(s, event.positions):
        s.pending = None
    refresh_view(s)


def _intervals(positions: list[int]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for p in positions:
        if out and p == out[-1][1] + 1:
            out[-1] = (out[-1][0], p)
        else:
            out.append((p, p))
    return out


def _apply_edit(s: ConversationState, event: MessageEdited) -> None:
    message = event.message
    # Entries are replaced in place below: the running sums over them are void.
    window_sums(s).clear()
    for index, entry in enumerate(s.window):
        if entry.position == event.position:
            s.window[index] = event.entry(entry.tool_name)
            if message.tool_calls:
                names = {c.id: c.function.name for c in message.tool_calls}
                for j in range(index + 1, len(s.window)):
                    later = s.window[j]
                    if later.message.role != "tool":
                        break
                    name = names.get(later.message.tool_call_id or "")
                    if name is not None:
                        s.window[j] = later.model_copy(update={"tool_name": name})
                if s.open_group_index == index:
                    s.group_calls = names
            break
    s.edited_messages += 1
    s.live_tokens_delta += event.tokens - event.replaced_tokens
    s.digest = event.digest
    if _touches_pending(s, (event.position,)):
        s.pending = None
    refresh_view(s)


def _apply_invalidation(s: ConversationState, event: SummaryInvalidated) -> None:
    open_position = _open_group_position(s)
    s.summaries = sorted(event.layers, key=lambda layer: layer.from_position)
    s.summarized_through = max((layer.through_position for layer in s.summaries), default=-1)
    s.window = sorted([*event.reopened, *s.window], key=lambda e: e.position)
    _reindex(s, open_position)
    s.pending = None
    s.summaries_invalidated += len(event.invalidated_versions)
    if event.reopened:
        s.dropped_before = min(s.dropped_before, event.reopened[0].position)
    refresh_view(s)


def _apply_message(s: ConversationState, event: MessageAppended) -> None:
    # Runs for every append: the fields are written into the model's __dict__, as
    # pydantic's __setattr__ does (no validation on assignment) without its handler
    # lookup per write; ``model_fields_set`` is not kept for the state.
    message = event.message
    d = s.__dict__
    tool_name = None
    if message.role == "tool":
        tool_name = s.group_calls.get(message.tool_call_id or "")
        s.open_calls.remove(message.tool_call_id or "")
    else:
        d["group_calls"] = {}
        d["open_calls"] = []
        d["open_group_index"] = None
    window = s.window
    window.append(event.entry(tool_name))
    if message.tool_calls:
        d["group_calls"] = {c.id: c.function.name for c in message.tool_calls}
        d["open_calls"] = [c.id for c in message.tool_calls]
        d["open_group_index"] = len(window) - 1
    elif message.role == "tool" and not s.open_calls:
        d["open_group_index"] = None
    d["next_position"] = event.position + 1
    d["appended_tokens"] = s.appended_tokens + event.tokens
    d["digest"] = event.digest
    if s.open_group_index is None:
        refresh_view(s)


def _apply_summary(s: ConversationState, event: SummaryCreated) -> None:
    pending = s.pending
    if event.native is not None:  # a provider's compaction re-folds all there is
        pending = PendingRange(
            from_position=event.from_position,
            through_position=event.through_position,
            threshold_version=event.threshold_version,
            from_version=0,
            through_version=0,
            consolidate=True,
        )
    layers = layers_after(
        s,
        pending,
        event.from_position,
        event.through_position,
        event.text,
        event.message_tokens,
        version=event.originator_version,
    )
    if event.native is not None:
        layers = [
            layer.model_copy(update={"native": event.native, "payload": event.payload}) for layer in layers
        ]
    s.summaries = layers
    s.summarized_through = max(layer.through_position for layer in layers)
    open_position = _open_group_position(s)
    s.window = [e for e in s.window if not event.from_position <= e.position <= event.through_position]
    _reindex(s, open_position)
    earlier = [e.position for e in s.window if e.position < event.from_position]
    s.pending = None
    s.summaries_created += 1
    s.summarizer_calls += 1
    s.summarizer_input_tokens += event.provenance.input_tokens or 0
    s.summarizer_output_tokens += event.provenance.output_tokens or 0
    # A summary changes the prefix anyway: the cap's batches start afresh.
    s.dropped_before = earlier[0] if earlier else event.through_position + 1
    s.placeholder_before = max(s.placeholder_before, event.through_position + 1)
    refresh_view(s)


def refresh_view(s: ConversationState) -> None:
    """Move the placeholder and cap lines, in batches (hysteresis), never every turn."""
    keep = s.policy.keep_tool_results
    visible_end = s.open_group_index if s.open_group_index is not None else len(s.window)
    if keep is not None:
        full = full_tool_results(s, visible_end)
        # Batched (the default), the line moves when 2N are in full; else at N + 1.
        if len(full) > (2 * keep if s.policy.tool_result_batching else keep):
            s.placeholder_before = full[-keep]
            # the results still in full from the new line on: the last ``keep``
            carry(s, "full", s.placeholder_before, visible_end, full[-keep:])
    if s.policy.truncates:
        _truncate(s, visible_end)
    cap = s.policy.max_context_tokens
    if cap is None:
        return
    # The visible entries' sum runs on from the last refresh (this runs for every
    # append); they are listed only when the cap is crossed.
    total = fixed_tokens(s) + visible_sum(s, visible_end)
    if total <= cap:
        return
    visible = [e for e in s.window[:visible_end] if e.position >= s.dropped_before]
    fixed = fixed_tokens(s)
    low_water = cap - max(0, cap - fixed) // 4
    # Drop whole groups from the front until under the low-water mark, never the newest.
    starts = [i for i, e in enumerate(visible) if e.starts_group]
    if len(starts) < 2:
        return
    dropped_tokens = 0
    previous = 0
    for start in starts[1:]:
        dropped_tokens += entries_cost(visible[previous:start], 0, s.placeholder_before)
        previous = start
        s.dropped_before = visible[start].position
        if total - dropped_tokens <= low_water:
            break


def _truncate(s: ConversationState, visible_end: int) -> None:
    """``strategy="truncate"``: when the visible messages cross the policy's trigger,
    the view's cut line moves to keep what a summary would keep (whole groups, the
    newest always); nothing is summarized and the log keeps every message."""
    start = bisect_left(s.window, s.dropped_before, hi=visible_end, key=lambda e: e.position)
    count = visible_end - start
    tokens = visible_sum(s, visible_end)
    extra = trigger_extra(s)
    if count < 2 or trigger_limit(s.policy, count, tokens, extra) is None:
        return
    planned = plan_range(
        s.window[start:visible_end],
        s.policy,
        open_group_index=None,
        tools_tokens=extra,
        tokens=tokens,
        keep_offset=keep_offset(s),
        keep_scale=keep_scale(s),
    )
    if planned is not None:
        s.dropped_before = planned.through_position + 1
