"""The state of a ``Conversation`` and the fold that builds it from events.

State is bounded by the unsummarized window: counters, the current summaries, the
pending range and the unsummarized messages. History lives only in the log. The
functions below the fold read the state (what the view shows, what it costs).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from contextledger.domain.events import (
    ConversationEvent,
    ForkOrigin,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
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
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.reduction import Entry, SummaryLayer, SummaryLink

__all__ = [
    "ConversationState",
    "PendingRange",
    "apply_event",
    "fixed_tokens",
    "folds_previous",
    "full_tool_results",
    "gap_run",
    "initial_state",
    "is_placeholder",
    "is_retracted",
    "layer_of",
    "layers_after",
    "newest_group_tokens",
    "summaries_tokens",
    "tail_index",
    "tail_tokens",
    "view_tokens",
    "visible_entries",
]


class PendingRange(BaseModel):
    """A pinned range waiting for its summary (set by ThresholdReached)."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    threshold_version: int
    from_position: int
    through_position: int
    from_version: int
    through_version: int
    consolidate: bool = False
    attempts: int = 0


class ConversationState(BaseModel):
    """Everything the aggregate knows. Snapshots store exactly this."""

    model_config = ConfigDict(extra="forbid", validate_assignment=False, ser_json_inf_nan="constants")

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
    #: Summaries a fork's shared history holds (made in its source and the source's own).
    inherited_summaries: int = 0
    summarizer_calls: int = 0
    summarizer_failures: int = 0
    summarizer_input_tokens: int = 0
    summarizer_output_tokens: int = 0
    provider_prompt_tokens: int = 0
    provider_completion_tokens: int = 0
    #: Our estimate of the prompts the provider reported usage for (to reconcile the two).
    provider_estimated_prompt_tokens: int = 0
    usage_records: int = 0
    key: str | None = None
    tools: tuple[dict[str, Any], ...] | None = None
    tools_tokens: int = 0
    #: Retracted positions as closed intervals, sorted and merged (positions are never reused).
    retracted: list[tuple[int, int]] = Field(default_factory=list)
    retracted_messages: int = 0
    edited_messages: int = 0
    #: Tokens of the current messages (retractions out, edits in) minus ``appended_tokens``.
    live_tokens_delta: int = 0
    summaries_invalidated: int = 0
    #: Set in a forked conversation: where its shared history lives.
    fork_of: ForkOrigin | None = None

    # Not state (never stored, never compared): running sums over the window by name,
    # so that folding an append does not pass over every unsummarized message (see
    # ``_carried``). Each holds the window list it was summed over: any change but an
    # append replaces that list, and an edit, which replaces entries in it, clears them.
    _sums: dict[str, tuple[list[Entry], Any, int, Any]] = PrivateAttr(default_factory=dict)

    def clone(self) -> ConversationState:
        """A copy that shares nothing mutable with this one: lists and dicts are copied,
        the frozen models in them (entries, summary layers and links, the pending
        range, the policy) are shared, as they can never change. ``model_copy(deep=True)``
        copied every one of them: most of a cold load's time, with a long chain of
        summary links."""
        copied = self.model_copy()
        for name, value in self.__dict__.items():
            if isinstance(value, list):
                copied.__dict__[name] = list(value)
            elif isinstance(value, dict):
                copied.__dict__[name] = dict(value)
        # tool definitions are plain JSON (tuples of dicts): copied whole, they are small
        copied.__dict__["tools"] = copy.deepcopy(self.tools)
        copied._sums = {}
        return copied

    def __eq__(self, other: object) -> bool:
        """Equal fields (the running sums are a cache, not state)."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(other) is type(self) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as BaseModel's own


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
        s.provider_estimated_prompt_tokens += event.estimated_prompt_tokens
        s.usage_records += 1
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


def is_retracted(s: ConversationState, position: int) -> bool:
    """Whether the message at ``position`` was retracted."""
    return any(a <= position <= b for a, b in s.retracted)


def layer_of(s: ConversationState, position: int) -> SummaryLayer | None:
    """The summary layer whose range holds ``position`` (None: not summarized)."""
    return next(
        (layer for layer in s.summaries if layer.from_position <= position <= layer.through_position),
        None,
    )


def tail_index(s: ConversationState) -> int:
    """Index of the first window entry after every summary (entries before it sit in
    the gap an invalidated layer left between valid layers)."""
    index = 0
    while index < len(s.window) and s.window[index].position <= s.summarized_through:
        index += 1
    return index


def gap_run(s: ConversationState) -> list[Entry]:
    """The oldest run of window entries that lies before a summary layer (messages an
    invalidated layer reopened between valid ones, in layered mode); empty if none."""
    if not s.window or s.window[0].position > s.summarized_through:
        return []
    first = s.window[0].position
    bound = min(layer.from_position for layer in s.summaries if layer.from_position > first)
    return [e for e in s.window if e.position < bound]


def folds_previous(s: ConversationState, pending: PendingRange | None) -> bool:
    """Whether the summary of ``pending`` re-folds the summaries before it (single mode
    or a consolidation) rather than standing beside them as a layer. A range in a gap
    between layers never does."""
    if not (s.policy.summary_mode == "single" or (pending is not None and pending.consolidate)):
        return False
    return pending is None or all(
        layer.through_position < pending.from_position for layer in s.summaries
    )


def _open_group_position(s: ConversationState) -> int | None:
    return s.window[s.open_group_index].position if s.open_group_index is not None else None


def _reindex(s: ConversationState, open_position: int | None) -> None:
    """Find the open group's assistant message again after the window changed."""
    if open_position is None:
        s.open_group_index = None
        return
    s.open_group_index = next(
        (i for i, e in enumerate(s.window) if e.position == open_position), None
    )
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
    _sums(s).clear()
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
    layers = layers_after(
        s,
        pending,
        event.from_position,
        event.through_position,
        event.text,
        event.message_tokens,
        version=event.originator_version,
    )
    s.summaries = layers
    s.summarized_through = max(layer.through_position for layer in layers)
    open_position = _open_group_position(s)
    s.window = [
        e for e in s.window if not event.from_position <= e.position <= event.through_position
    ]
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


def layers_after(
    s: ConversationState,
    pending: PendingRange | None,
    from_position: int,
    through_position: int,
    text: str,
    message_tokens: int,
    *,
    version: int = 0,
) -> list[SummaryLayer]:
    """The summary layers that stand once this summary is recorded."""
    single = folds_previous(s, pending)
    covers_from = 0 if single else from_position
    link = SummaryLink(
        version=version,
        from_position=covers_from,
        through_position=through_position,
        message_tokens=message_tokens,
    )
    if single:
        chain: tuple[SummaryLink, ...] = ()
        previous = s.summaries[0] if len(s.summaries) == 1 else None
        if (
            previous is not None
            and previous.link is not None
            and previous.from_position == 0
            and not (pending is not None and pending.consolidate)
        ):
            chain = (*previous.chain, previous.link)
        return [
            SummaryLayer(
                from_position=0,
                through_position=through_position,
                text=text,
                message_tokens=message_tokens,
                link=link,
                chain=chain,
            )
        ]
    layers = [
        *s.summaries,
        SummaryLayer(
            from_position=from_position,
            through_position=through_position,
            text=text,
            message_tokens=message_tokens,
            link=link,
        ),
    ]
    return sorted(layers, key=lambda layer: layer.from_position)


def is_placeholder(s: ConversationState, entry: Entry) -> bool:
    return (
        entry.message.role == "tool"
        and (entry.position < s.placeholder_before or entry.hidden)
        and entry.placeholder_tokens is not None
    )


def summaries_tokens(s: ConversationState, layers: list[SummaryLayer] | None = None) -> int:
    """What the summary layers cost in the prompt where the policy places them.

    ``message_tokens`` is a summary's cost as a message of its own (a system or a user
    message: both role names are one token). Merged into the system prompt, a layer
    loses its message framing (3 tokens) and its role (1) and gains a blank-line
    separator (1); the first layer keeps its framing when there is no system prompt.
    """
    layers = s.summaries if layers is None else layers
    total = sum(layer.message_tokens for layer in layers)
    if s.policy.summary_placement == "system_prompt" and layers:
        total -= 3 * len(layers)
        if s.system_prompt is None:
            total += 3
    return total


def fixed_tokens(s: ConversationState) -> int:
    """What the prompt costs besides its messages: priming, tools, system prompt, summaries."""
    system = s.system_tokens if s.system_prompt is not None else 0
    return s.reply_priming + s.tools_tokens + system + summaries_tokens(s)


def view_tokens(s: ConversationState, entries: list[Entry]) -> int:
    """What the prompt costs with ``entries`` as its messages."""
    return fixed_tokens(s) + _entries_cost(entries, 0, s.placeholder_before)


def _entries_cost(entries: list[Entry], from_position: int, placeholder_before: int) -> int:
    """What ``entries`` from ``from_position`` on cost as messages, tool results before
    ``placeholder_before`` as placeholders (is_placeholder inlined: this runs for
    every append)."""
    total = 0
    for entry in entries:
        if entry.position < from_position:
            continue
        placeholder = entry.placeholder_tokens
        if (
            placeholder is not None
            and (entry.position < placeholder_before or entry.hidden)
            and entry.message.role == "tool"
        ):
            total += placeholder
        else:
            total += entry.tokens
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
        full = full_tool_results(s, visible_end)
        if len(full) > 2 * keep:
            s.placeholder_before = full[-keep]
            # the results still in full from the new line on: the last ``keep``
            _carry(s, "full", s.placeholder_before, visible_end, full[-keep:])
    cap = s.policy.max_context_tokens
    if cap is None:
        return
    # The visible entries' sum runs on from the last refresh (this runs for every
    # append); they are listed only when the cap is crossed.
    total = fixed_tokens(s) + _visible_sum(s, visible_end)
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
        dropped_tokens += _entries_cost(visible[previous:start], 0, s.placeholder_before)
        previous = start
        s.dropped_before = visible[start].position
        if total - dropped_tokens <= low_water:
            break


def _carried(
    s: ConversationState,
    name: str,
    key: Any,
    begin: int,
    end: int,
    add: Callable[[Any, list[Entry]], Any],
    empty: Any,
) -> Any:
    """The running sum ``name``: ``add(sum, entries)`` over the window's entries from
    ``begin`` to ``end``, starting from ``empty``; carried on from its last value when
    only appends came since (the same window list and ``key``, an end no earlier)."""
    window = s.window
    cached = _sums(s).get(name)
    value = empty
    if cached is not None and cached[0] is window and cached[1] == key and cached[2] <= end:
        begin, value = cached[2], cached[3]
    if begin < end:
        value = add(value, window[begin:end])
    _carry(s, name, key, end, value)
    return value


def _sums(s: ConversationState) -> dict[str, tuple[list[Entry], Any, int, Any]]:
    """``s._sums``, read from pydantic's dict of private attributes: reading a private
    attribute by name goes through ``BaseModel.__getattr__`` (1.7 against 0.05 µs),
    and an append reads it four times."""
    private = s.__pydantic_private__
    sums: dict[str, tuple[list[Entry], Any, int, Any]] = (
        private["_sums"] if private is not None else s._sums
    )
    return sums


def _carry(s: ConversationState, name: str, key: Any, end: int, value: Any) -> None:
    """Record the running sum ``name`` as ``value`` over the window up to ``end``."""
    _sums(s)[name] = (s.window, key, end, value)


def _visible_sum(s: ConversationState, end: int) -> int:
    """What the window's first ``end`` entries from ``dropped_before`` on cost in the
    prompt (``view_tokens`` less the fixed part)."""
    dropped, before = s.dropped_before, s.placeholder_before
    total: int = _carried(
        s, "view", (dropped, before), 0, end, lambda v, es: v + _entries_cost(es, dropped, before), 0
    )
    return total


def full_tool_results(s: ConversationState, end: int) -> list[int]:
    """Positions of the tool results among the window's first ``end`` entries still
    shown in full (at or after ``placeholder_before``, and with a placeholder to
    stand for them), oldest first."""
    before = s.placeholder_before

    def add(positions: list[int], entries: list[Entry]) -> list[int]:
        return positions + [
            e.position
            for e in entries
            if e.message.role == "tool"
            and e.position >= before
            and e.placeholder_tokens is not None
            and not e.hidden
        ]

    positions: list[int] = _carried(s, "full", before, 0, end, add, [])
    return positions


def tail_tokens(s: ConversationState, start: int) -> int:
    """The tokens of the window's entries from index ``start`` on (the unsummarized
    messages after every summary)."""
    total: int = _carried(
        s, "tail", start, start, len(s.window), lambda v, es: v + sum(e.tokens for e in es), 0
    )
    return total


def visible_entries(s: ConversationState) -> list[Entry]:
    """Window entries the working memory shows (closed groups, not dropped)."""
    end = s.open_group_index if s.open_group_index is not None else len(s.window)
    return [e for e in s.window[:end] if e.position >= s.dropped_before]
