"""When a conversation pins a range for its next summary (``ThresholdReached``).

``range_to_pin`` reads the state after a command and says which range crosses the
policy's trigger, or None. A range is pinned once: while one is pending, or when the
policy never summarizes, nothing is.
"""

from __future__ import annotations

from typing import Any

from contextledger.domain.folding.budget import keep_offset, keep_scale, trigger_extra
from contextledger.domain.folding.queries import gap_run, tail_index
from contextledger.domain.folding.state import ConversationState
from contextledger.domain.folding.sums import tail_tokens
from contextledger.domain.values.reduction import plan_range, trigger_limit

__all__ = ["range_to_pin"]


def range_to_pin(s: ConversationState) -> dict[str, Any] | None:
    """The fields of the ``ThresholdReached`` the state calls for (None: none does)."""
    if s.pending is not None or not s.policy.summarizes or s.policy.truncates:
        return None
    summarized = bool(s.summaries)
    start = tail_index(s)
    gap = gap_run(s)
    if gap:
        # Messages an invalidated layer reopened between valid layers: when the
        # unsummarized messages cross a trigger, the gap is summarized first, whole
        # (it holds whole groups), as a layer of its own.
        unsummarized = [*gap, *s.window[start:]]
        count = len(unsummarized)
        tokens = sum(e.tokens for e in unsummarized)
        limit = trigger_limit(s.policy, count, tokens, trigger_extra(s), summarized=summarized)
        if limit is None:
            return None
        return {
            "limit": limit,
            "unsummarized_messages": count,
            "unsummarized_tokens": tokens,
            "from_position": gap[0].position,
            "through_position": gap[-1].position,
            "from_version": gap[0].version,
            "through_version": gap[-1].version,
            "consolidate": False,
            "policy_version": s.policy_version,
        }
    # The tail's tokens are a running sum: an append that crosses no trigger
    # neither passes over the window nor copies it.
    tokens = tail_tokens(s, start)
    extra = trigger_extra(s)
    if trigger_limit(s.policy, len(s.window) - start, tokens, extra, summarized=summarized) is None:
        return None
    open_index = s.open_group_index - start if s.open_group_index is not None else None
    planned = plan_range(
        s.window[start:],
        s.policy,
        open_group_index=open_index,
        tools_tokens=extra,
        tokens=tokens,
        keep_offset=keep_offset(s),
        keep_scale=keep_scale(s),
        summarized=summarized,
    )
    if planned is None:
        return None
    consolidate = (
        s.policy.summary_mode == "layered"
        and start == 0
        and sum(layer.message_tokens for layer in s.summaries) > s.policy.layered_max_tokens
    )
    return {"consolidate": consolidate, "policy_version": s.policy_version, **planned.model_dump()}
