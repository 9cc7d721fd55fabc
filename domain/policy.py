"""The reduction policy: when to summarize, what to keep, how the view is bounded."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    ValidationError,
    model_serializer,
    model_validator,
)

from contextledger.domain.errors import InvalidPolicyError
from contextledger.domain.validation import check_unicode_fields

__all__ = ["ReductionPolicy"]


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
    summary_placement: Literal["system_message", "system_prompt", "user_message"] = "system_message"
    token_scope: Literal["messages", "prompt"] = "prompt"
    summarize_hidden: bool = False

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        # Off, it is left out: policies stored before it dump (and seal) as they did.
        data = handler(self)
        if not self.summarize_hidden and isinstance(data, dict):
            data.pop("summarize_hidden", None)
        return data

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
        check_unicode_fields(self)
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
        return self

    @property
    def summarizes(self) -> bool:
        """True when some trigger is set."""
        return self.trigger_messages is not None or self.trigger_tokens is not None

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
