"""The reduction policy: when to summarize, what to keep, how the view is bounded."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from contextledger.domain.values.errors import InvalidPolicyError
from contextledger.domain.values.validation import check_unicode_fields

__all__ = ["ReductionPolicy"]

#: Policies checked already, by id: pydantic runs a model's "after" validator again
#: whenever an instance is given as another model's field (every event and state that
#: holds it), and a frozen policy checked once stays valid. Held strongly (the id of a
#: policy collected could name another), a few hundred at most.
_CHECKED: dict[int, ReductionPolicy] = {}
_CHECKED_LIMIT = 256


class ReductionPolicy(BaseModel):
    """How a conversation is reduced. Validated on construction; stored with the conversation.

    - Message trigger: summarize when unsummarized messages exceed ``trigger_messages``,
      keeping at most the ``keep_messages`` most recent.
    - Token trigger: summarize when unsummarized tokens exceed ``trigger_tokens``,
      keeping at most ``keep_tokens`` of recent messages.
    - ``token_scope``: what the token trigger and ``keep_tokens`` count. ``prompt`` (the
      default) counts what the prompt costs, as the cap counts it: the trigger fires
      when the system prompt, the summaries, the tool definitions, reply priming and
      the unsummarized messages (per-message overhead included) cost more than
      ``trigger_tokens``, and ``keep_tokens`` bounds the kept messages together with
      the part of the prompt a summary cannot shrink (system prompt, tools, priming).
      ``messages`` counts the unsummarized messages and the tool definitions only (the
      behaviour of policies stored before this option: they are read back with it).
    - Both set (hybrid): fires when either fires; the kept window satisfies both.
    - ``summary_mode``: ``single`` keeps one rolling summary; ``layered`` accumulates
      summaries and folds them into one when their tokens exceed ``layered_max_tokens``.
    - ``keep_tool_results``: tool results older than the N most recent are shown as a
      short placeholder (in batches: the placeholder line moves when 2N are full).
    - ``max_context_tokens``: hard cap on what ``context()`` costs; the oldest
      unsummarized turns are dropped from the view (never from the log) in batches.
    - ``summarizer_model``: the model the summarizer uses (None: the summarizer's own).
    - ``max_summary_tokens``: longest summary accepted.
    - ``summary_placement``: where the summary stands in the context:
      ``system_message`` (a system message of its own after the system prompt, the
      default), ``system_prompt`` (appended to the system prompt, for providers that
      take one system message only) or ``user_message`` (a user message first).
    - ``summarize_hidden``: give the summarizer the content of tool results a framework
      hid from the model (``append(..., hidden=True)``); off (the default), it gets the
      placeholder the model sees, as a provider's own compaction never sees them.
    - ``strategy``: ``summarize`` (the default) summarizes what a trigger cuts;
      ``truncate`` only leaves it out of the view (no model call, nothing summarized,
      the log keeps everything; the kept window is bounded as above, tool-call groups
      whole, the system prompt kept); ``off`` reduces nothing (no trigger, no cap, no
      placeholders: every message is sent; ``ReductionPolicy.off()``).
    - ``trigger_when``: ``exceeded`` (the default) fires when the unsummarized messages
      (or tokens) are over the trigger; ``reached`` fires when they reach it.
    - ``summarize_every``: after the first summary, the message trigger fires again
      when this many messages came after the kept ones (``keep_messages`` plus
      ``summarize_every`` unsummarized; with ``reached``, the design's "next trigger at
      110" for a 100/10 policy and 10); None (the default): at ``trigger_messages``
      each time.
    - ``tool_result_batching``: True (the default) moves the placeholder line of
      ``keep_tool_results`` in batches (N to 2N results in full: the prefix stays
      stable between moves); False keeps exactly N in full.

    ``ReductionPolicy.token_budget()`` gives the design's token-budget defaults (a
    4,000-token target to keep, summarizing past 1,000 tokens more). Given only
    ``trigger_tokens``, ``keep_tokens`` is 0: a summary keeps only the newest
    tool-call group (the turn the model answers next).

    The kept window never splits a tool-call group, so it can hold fewer messages
    than ``keep_messages`` when the newest group is large.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    trigger_messages: int | None = None
    keep_messages: int | None = None
    trigger_tokens: int | None = None
    keep_tokens: int | None = None
    summary_mode: Literal["single", "layered"] = "single"
    layered_max_tokens: int = 2000
    keep_tool_results: int | None = None
    max_context_tokens: int | None = None
    summarizer_model: str | None = None
    max_summary_tokens: int = 1000
    summary_placement: Literal["system_message", "system_prompt", "user_message", "assistant_message"] = (
        "system_message"
    )
    token_scope: Literal["messages", "prompt"] = "prompt"
    summarize_hidden: bool = False
    strategy: Literal["summarize", "truncate", "off"] = "summarize"
    trigger_when: Literal["exceeded", "reached"] = "exceeded"
    summarize_every: int | None = None
    tool_result_batching: bool = True

    #: Fields added after policies were first stored, with the value that means the
    #: behaviour from before them: at that value they are left out of a dump.
    _LATER_FIELDS: ClassVar[dict[str, Any]] = {
        "summarize_hidden": False,
        "strategy": "summarize",
        "trigger_when": "exceeded",
        "summarize_every": None,
        "tool_result_batching": True,
    }

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        # At their defaults they are left out: policies stored before them dump (and
        # seal) as they did.
        data = handler(self)
        if isinstance(data, dict):
            for name, default in self._LATER_FIELDS.items():
                if name in data and data[name] == default:
                    del data[name]
        return data

    @classmethod
    def off(cls) -> ReductionPolicy:
        """No reduction: every message is sent, nothing is summarized, placeholdered
        or cut (no context cap either: the provider refuses a prompt over its window).
        The log, the totals and the usage records work as with any policy."""
        return cls(strategy="off")

    @classmethod
    def token_budget(cls, target: int = 4000, threshold: int = 1000, **fields: Any) -> ReductionPolicy:
        """The design's token-budget reducer: keep ``target`` tokens (4,000), summarize
        when the prompt is over them by more than ``threshold`` (1,000): the trigger is
        at ``target + threshold`` and a summary keeps ``target``. Other fields pass on."""
        return cls(trigger_tokens=target + threshold, keep_tokens=target, **fields)

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first.get("loc", ()))
            text = first["msg"].removeprefix("Value error, ")
            raise InvalidPolicyError(
                f"invalid reduction policy: {where + ': ' if where else ''}{text}"
            ) from exc

    @model_validator(mode="after")
    def _check(self) -> ReductionPolicy:
        if _CHECKED.get(id(self)) is self:  # this very policy, given again as a field
            return self
        check_unicode_fields(self)
        self._check_options()
        for name in ("trigger_messages", "trigger_tokens", "max_context_tokens"):
            value = getattr(self, name)
            if value is not None and value <= 0:
                raise ValueError(f"{name} must be positive, not {value}")
        for name in ("keep_messages", "keep_tokens"):
            value = getattr(self, name)
            if value is not None and value < 0:
                raise ValueError(f"{name} must not be negative, not {value}")
        for trigger, keep in (("trigger_messages", "keep_messages"), ("trigger_tokens", "keep_tokens")):
            t, k = getattr(self, trigger), getattr(self, keep)
            if k is not None and t is None:
                raise ValueError(f"{keep} needs {trigger}")
            if t is not None and k is not None and k >= t:
                raise ValueError(f"{keep} ({k}) must be smaller than {trigger} ({t})")
        if self.keep_tool_results is not None and self.keep_tool_results < 1:
            raise ValueError("keep_tool_results must be at least 1 (the newest result is needed)")
        if self.max_summary_tokens < 16:
            raise ValueError("max_summary_tokens must be at least 16")
        if self.layered_max_tokens < self.max_summary_tokens:
            raise ValueError("layered_max_tokens must be at least max_summary_tokens")
        cap = self.max_context_tokens
        if cap is not None:
            if self.max_summary_tokens >= cap:
                raise ValueError(
                    f"max_summary_tokens ({self.max_summary_tokens}) must be below max_context_tokens ({cap})"
                )
            if self.keep_tokens is not None and self.keep_tokens + self.max_summary_tokens >= cap:
                raise ValueError("keep_tokens plus max_summary_tokens must stay below max_context_tokens")
        if len(_CHECKED) >= _CHECKED_LIMIT:
            _CHECKED.clear()
        _CHECKED[id(self)] = self
        return self

    def _check_options(self) -> None:
        if self.strategy == "off":
            set_ = [
                name
                for name in ("trigger_messages", "trigger_tokens", "keep_tool_results", "max_context_tokens")
                if getattr(self, name) is not None
            ]
            if set_:
                raise ValueError(f"strategy 'off' reduces nothing: {', '.join(set_)} cannot be set with it")
        every = self.summarize_every
        if every is not None:
            if every < 1:
                raise ValueError(f"summarize_every must be at least 1, not {every}")
            if self.trigger_messages is None:
                raise ValueError("summarize_every needs trigger_messages")
            if self.strategy != "summarize":
                raise ValueError("summarize_every schedules summaries: it needs strategy 'summarize'")
        if self.strategy == "truncate" and not self.summarizes:
            raise ValueError("strategy 'truncate' needs trigger_messages or trigger_tokens")
        if not self.tool_result_batching and self.keep_tool_results is None:
            raise ValueError("tool_result_batching=False needs keep_tool_results")

    @property
    def summarizes(self) -> bool:
        """True when some trigger is set."""
        return self.trigger_messages is not None or self.trigger_tokens is not None

    @property
    def truncates(self) -> bool:
        """True when a trigger cuts the view instead of summarizing (``truncate``)."""
        return self.strategy == "truncate"

    def message_trigger(self, summarized: bool) -> int | None:
        """The unsummarized message count the message trigger compares with: after the
        first summary, with ``summarize_every``, the kept ones plus that many."""
        if self.trigger_messages is None:
            return None
        if summarized and self.summarize_every is not None:
            return (self.keep_messages or 0) + self.summarize_every
        return self.trigger_messages

    def crosses(self, value: int, trigger: int) -> bool:
        """Whether ``value`` crosses ``trigger`` by ``trigger_when``."""
        return value >= trigger if self.trigger_when == "reached" else value > trigger

    @property
    def counts_prompt(self) -> bool:
        """True when the token trigger and keep count the whole prompt."""
        return self.trigger_tokens is not None and self.token_scope == "prompt"

    @property
    def keep_messages_limit(self) -> int | None:
        if self.trigger_messages is None:
            return None
        return self.keep_messages or 0

    @property
    def keep_tokens_limit(self) -> int | None:
        if self.trigger_tokens is None:
            return None
        return self.keep_tokens or 0
