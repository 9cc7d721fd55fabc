"""Queries over a conversation's state: what the working memory shows and what it
costs, where the summaries stand, and which positions are retracted or summarized.

Pure functions of ``ConversationState``; the fold (``contextledger.domain.folding.fold``) and the
aggregate's commands and queries (``contextledger.domain.conversation``) build on them.
"""

from __future__ import annotations

from contextledger.domain.folding.state import ConversationState, PendingRange
from contextledger.domain.folding.sums import entries_cost
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import (
    Entry,
    SummaryLayer,
    SummaryLink,
    placeholder_message,
    summary_message,
)

__all__ = [
    "fixed_tokens",
    "folds_previous",
    "full_history_tokens",
    "gap_run",
    "is_placeholder",
    "is_retracted",
    "layer_of",
    "layers_after",
    "newest_group_tokens",
    "reported_offset",
    "summaries_tokens",
    "tail_index",
    "view_tokens",
    "visible_entries",
    "working_memory",
]


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
    invalidated layer reopened between valid ones, in layered mode); empty if none,
    also when no layer begins after the window's first entry (entries a summary's
    range reaches over without having summarized them stay in the window, shown)."""
    if not s.window or s.window[0].position > s.summarized_through:
        return []
    first = s.window[0].position
    bound = min((layer.from_position for layer in s.summaries if layer.from_position > first), default=None)
    if bound is None:
        return []
    return [e for e in s.window if e.position < bound]


def folds_previous(s: ConversationState, pending: PendingRange | None) -> bool:
    """Whether the summary of ``pending`` re-folds the summaries before it (single mode
    or a consolidation) rather than standing beside them as a layer. A range in a gap
    between layers never does."""
    if not (s.policy.summary_mode == "single" or (pending is not None and pending.consolidate)):
        return False
    return pending is None or all(layer.through_position < pending.from_position for layer in s.summaries)


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
    covers_from = s.erased_before if single else from_position
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
            and previous.from_position == s.erased_before
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

    ``message_tokens`` is a summary's cost as a message of its own (a system, user or
    assistant message: each role name is one token). Merged into the system prompt, a layer
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


def reported_offset(s: ConversationState) -> int | None:
    """The provider's count of the prefix its last calibrating usage report covered,
    less our estimate of it (None: no report, or the prompt no longer begins with
    that prefix). Added to an estimate of the prompt, it makes the provider's count
    of the prefix plus our estimate of what came after."""
    if s.reported_prompt_tokens is None or s.reported_cuts != (s.placeholder_before, s.dropped_before):
        return None
    return s.reported_prompt_tokens - s.reported_estimate_tokens


def view_tokens(s: ConversationState, entries: list[Entry]) -> int:
    """What the prompt costs with ``entries`` as its messages."""
    return fixed_tokens(s) + entries_cost(entries, 0, s.placeholder_before)


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


def visible_entries(s: ConversationState) -> list[Entry]:
    """Window entries the working memory shows (closed groups, not dropped)."""
    end = s.open_group_index if s.open_group_index is not None else len(s.window)
    return [e for e in s.window[:end] if e.position >= s.dropped_before]


def full_history_tokens(s: ConversationState) -> int:
    """What sending every message ever appended would cost (no reduction)."""
    system = s.system_tokens if s.system_prompt is not None else 0
    return s.reply_priming + s.tools_tokens + system + s.appended_tokens


def working_memory(s: ConversationState) -> tuple[list[Message], int]:
    """The context the model is sent next, and what its prompt costs in tokens.

    Summaries stand where the policy places them: as system messages after the
    system prompt (the default), as user or assistant messages, or merged into the
    system prompt. As messages, each stands where its range is, so a gap an invalidated
    layer reopened between valid layers keeps its order.
    """
    messages: list[Message] = []
    tokens = s.reply_priming + s.tools_tokens + summaries_tokens(s)
    if s.system_prompt is not None:
        tokens += s.system_tokens
    placement = s.policy.summary_placement
    layers = list(s.summaries)
    if placement == "system_prompt" and layers:
        parts = [] if s.system_prompt is None else [s.system_prompt]
        parts.extend(
            str(summary_message(x.from_position, x.through_position, x.text).content) for x in layers
        )
        messages.append(Message(role="system", content="\n\n".join(parts)))
        layers = []
    elif s.system_prompt is not None:
        messages.append(Message(role="system", content=s.system_prompt))
    role = {"user_message": "user", "assistant_message": "assistant"}.get(placement, "system")

    def summary(layer: SummaryLayer) -> Message:
        rendered = summary_message(layer.from_position, layer.through_position, layer.text)
        return Message(role=role, content=rendered.content)

    for entry in visible_entries(s):
        while layers and layers[0].from_position < entry.position:
            messages.append(summary(layers.pop(0)))
        if is_placeholder(s, entry):
            messages.append(placeholder_message(entry))
            tokens += entry.placeholder_tokens or 0
        else:
            messages.append(entry.message)
            tokens += entry.tokens
    messages.extend(summary(layer) for layer in layers)
    return messages, tokens
