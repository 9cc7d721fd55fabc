"""The state of a ``Conversation``: what the aggregate knows, and what snapshots store.

State is bounded by the unsummarized window: counters, the current summaries, the
pending range and the unsummarized messages. History lives only in the log. The fold
that builds it from events is in ``contextledger.domain.folding.fold``, what it shows and
costs in ``contextledger.domain.folding.queries``, and the running sums over its window in
``contextledger.domain.folding.sums``.
"""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from contextledger.domain.events import ForkOrigin
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.reduction import Entry, SummaryLayer

__all__ = ["ConversationState", "PendingRange"]


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
    #: Of the reported prompt tokens, those read from and written to the prompt cache.
    provider_cache_read_tokens: int = 0
    provider_cache_creation_tokens: int = 0
    #: Model calls whose context a standing summary served (hits), and those made while
    #: a range waited for a new one (misses): ``UsageRecorded.reduction``.
    reduction_hits: int = 0
    reduction_misses: int = 0
    #: The last calibrating usage report (``UsageRecorded.calibrates``) while the
    #: prefix it covers is still what the prompt begins with: the provider's count,
    #: our estimate of the same prompt, and the view's cut lines when it was made
    #: (``placeholder_before``, ``dropped_before``). None: no such report.
    reported_prompt_tokens: int | None = None
    reported_estimate_tokens: int = 0
    reported_cuts: tuple[int, int] = (0, 0)
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
    #: In a fork whose inherited history was erased (``domain/remainder.py``): the
    #: positions before it were inherited, and nothing is left of them. Never stored:
    #: such a state is folded from the fork's own records on every load.
    erased_before: int = Field(default=0, exclude=True)
    #: Whether this is such a fork's remainder (never stored either).
    inherited_erased: bool = Field(default=False, exclude=True)

    # Not state (never stored, never compared): running sums over the window by name,
    # so that folding an append does not pass over every unsummarized message (see
    # ``contextledger.domain.folding.sums``). Each holds the window list it was summed over: any
    # change but an append replaces that list, and an edit, which replaces entries in
    # it, clears them.
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

    def private_copy(self) -> ConversationState:
        """A copy a caller may change at will without touching this one: ``clone``, with
        the entries and summary layers that hold JSON containers (multimodal content,
        Responses items, a framework's original, a native compaction's payload) copied
        deeply. The others are frozen all the way down (strings, numbers, frozen models)
        and are shared: copying them deeply was most of the cost of every
        ``Ledger.conversation()``."""
        copied = self.clone()
        copied.__dict__["window"] = [e if _frozen_entry(e) else copy.deepcopy(e) for e in self.window]
        copied.__dict__["summaries"] = [s if s.payload is None else copy.deepcopy(s) for s in self.summaries]
        return copied

    def __eq__(self, other: object) -> bool:
        """Equal fields (the running sums are a cache, not state)."""
        if not isinstance(other, BaseModel):
            return NotImplemented
        return type(other) is type(self) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # mutable, as BaseModel's own


def _frozen_entry(entry: Entry) -> bool:
    """Whether nothing in ``entry`` can be changed in place (no dict or list inside)."""
    return entry.items is None and entry.original is None and not isinstance(entry.message.content, tuple)
