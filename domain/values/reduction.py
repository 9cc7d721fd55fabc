"""Pure functions of reduction: what gets summarized, how the working memory looks.

Nothing here does I/O or counts tokens: token counts arrive as values.
"""

from __future__ import annotations

from collections.abc import Sequence
from inspect import signature
from operator import not_
from typing import Any, Literal
from uuid import UUID

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from contextledger.domain.values.messages import Message
from contextledger.domain.values.policy import ReductionPolicy

__all__ = [
    "Entry",
    "PlannedRange",
    "SummaryLayer",
    "SummaryLink",
    "omit_unhidden",
    "placeholder_message",
    "placeholder_text",
    "plan_range",
    "summary_message",
    "tokens_fire",
    "tools_leave_room",
    "trigger_limit",
]


#: pydantic-core can leave a field out by its value (``Field(exclude_if=...)``, 2.11+).
_EXCLUDE_IF = "exclude_if" in signature(Field).parameters
_HIDDEN: Any = Field(default=False, exclude_if=not_) if _EXCLUDE_IF else False


class Entry(BaseModel):
    """One unsummarized message as the aggregate keeps it."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    position: int
    version: int
    message: Message
    tokens: int
    #: Tokens of the placeholder that stands for this message (tool results only).
    placeholder_tokens: int | None = None
    #: The function this tool result answers (tool results only).
    tool_name: str | None = None
    #: The raw Responses-format items the message stands for (None: a chat message).
    items: tuple[dict[str, Any], ...] | None = None
    #: The framework's own form of the message (``MessageAppended.original``).
    original: dict[str, Any] | None = None
    #: A tool result a framework filtered from the model (``MessageAppended.hidden``):
    #: always shown as its placeholder. Left out of dumps when False (as ``omit_unhidden``
    #: leaves it out of the events'), by pydantic-core itself where it can: a snapshot
    #: then dumps its whole window without a wrap serializer's round trip through Python
    #: values per entry.
    hidden: bool = _HIDDEN

    if not _EXCLUDE_IF:  # pragma: no cover - pydantic before 2.11

        @model_serializer(mode="wrap")
        def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
            return omit_unhidden(self.hidden, handler(self))

    @property
    def starts_group(self) -> bool:
        """Every message but a tool result starts a unit a cut may fall before."""
        return self.message.role != "tool"

    @classmethod
    def of_checked(
        cls,
        position: int,
        version: int,
        message: Message,
        tokens: int,
        placeholder_tokens: int | None,
        tool_name: str | None,
        hidden: bool,
    ) -> Entry:
        """The entry of a chat message (no ``items``, no ``original``) whose values a
        validated event holds, of the very types the fields declare: set as
        ``Entry(...)`` sets them -- the same fields, all of them given -- without
        validating them a second time (every append folds one)."""
        entry = cls.__new__(cls)
        _set(
            entry,
            "__dict__",
            {
                "position": position,
                "version": version,
                "message": message,
                "tokens": tokens,
                "placeholder_tokens": placeholder_tokens,
                "tool_name": tool_name,
                "items": None,
                "original": None,
                "hidden": hidden,
            },
        )
        _set(entry, "__pydantic_fields_set__", set(_ENTRY_FIELDS))
        _set(entry, "__pydantic_extra__", None)
        _set(entry, "__pydantic_private__", None)
        return entry


_set = object.__setattr__
_ENTRY_FIELDS = tuple(Entry.model_fields)


def omit_unhidden(hidden: bool, data: Any) -> Any:
    """``data`` (a dump) without ``hidden`` when it is False: what was stored before the
    flag existed dumps (and so seals and snapshots) exactly as it did."""
    if not hidden and isinstance(data, dict):
        data.pop("hidden", None)
    return data


def omit_unset_native(data: Any) -> Any:
    """``data`` (a dump) without ``native`` and ``payload`` when they are None: what was
    stored before native compactions existed dumps (and so seals and snapshots) exactly
    as it did."""
    if isinstance(data, dict):
        for name in ("native", "payload"):
            if name in data and data[name] is None:
                data.pop(name)
    return data


class SummaryLink(BaseModel):
    """A reference to a recorded summary (its text stays in the log)."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    #: The version of its ``SummaryCreated`` event.
    version: int
    #: The conversation whose log holds it (None: this one; set in forks).
    origin: UUID | None = None
    from_position: int
    through_position: int
    message_tokens: int


class SummaryLayer(BaseModel):
    """A summary standing in the working memory for positions ``from``..``through``."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    from_position: int
    through_position: int
    text: str
    #: What the rendered summary message costs in a prompt.
    message_tokens: int
    #: This summary in the log (None in states stored before edits existed).
    link: SummaryLink | None = None
    #: Earlier summaries this one re-folded (single mode), oldest first: when an edit
    #: invalidates this one, the newest of them not touched by the edit stands again.
    chain: tuple[SummaryLink, ...] = ()
    #: The provider format of a compaction the provider made (``"responses"``,
    #: ``"anthropic"``); None for contextledger's own summaries.
    native: str | None = None
    #: A native compaction's own items or blocks, exactly as the provider gave them.
    payload: tuple[dict[str, Any], ...] | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> Any:
        return omit_unset_native(handler(self))


#: Which trigger a threshold crossing crossed.
Limit = Literal["messages", "tokens", "messages+tokens"]


class PlannedRange(BaseModel):
    """The range a threshold crossing pins for summarization."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    limit: Limit
    unsummarized_messages: int
    unsummarized_tokens: int
    from_position: int
    through_position: int
    from_version: int
    through_version: int


def plan_range(
    entries: Sequence[Entry],
    policy: ReductionPolicy,
    *,
    open_group_index: int | None,
    tools_tokens: int = 0,
    tokens: int | None = None,
    keep_offset: int = 0,
    keep_scale: float = 1.0,
    summarized: bool = False,
) -> PlannedRange | None:
    """Decide whether the policy fires over ``entries`` (all unsummarized messages,
    oldest first) and, if so, which leading range to summarize.

    The token trigger sees the messages' tokens plus ``tools_tokens``: the tool
    definitions sent with every call, or, when the policy counts the whole prompt,
    everything in it besides the messages (``unsummarized_tokens`` stays the
    messages' tokens alone). ``keep_offset``: what ``keep_tokens`` spends before the
    kept messages (the prompt's fixed part, when the policy counts the whole prompt).
    ``keep_scale``: how many tokens the provider counts for each of ours (its reported
    count of the prompt over our estimate of it, when that is above 1): ``keep_tokens``
    bounds the kept part by that calibrated count, as the trigger counts the prompt.

    The kept suffix is the longest one that starts a tool-call group and satisfies
    ``keep_messages`` and ``keep_tokens`` -- and, when the token trigger fired, leaves
    the prompt within the trigger beside what it already holds besides the messages
    (``tools_tokens``: a standing summary included), so that a summary landing does not
    leave the trigger crossed with nothing more to cut -- but never less than the newest
    group (the turn the model answers next); an open (unanswered) group is never cut.
    Returns None when the policy does not fire or nothing can be cut. ``tokens``:
    the entries' tokens, when the caller keeps them as a running sum. ``summarized``:
    a summary stands already (``summarize_every`` schedules the message trigger).
    """
    count = len(entries)
    if tokens is None:
        tokens = sum(e.tokens for e in entries)
    limit = trigger_limit(policy, count, tokens, tools_tokens, summarized=summarized)
    if limit is None:
        return None
    keep_n = policy.keep_messages_limit
    keep_t = policy.keep_tokens_limit
    if keep_t is not None:
        keep_t = max(0, int(keep_t / keep_scale) - keep_offset)
    trigger = policy.trigger_tokens if limit in ("tokens", "messages+tokens") else None
    cut = count  # index of the first kept entry
    kept_tokens = 0
    for index in range(count - 1, -1, -1):
        kept_tokens += entries[index].tokens
        kept = count - index
        if (keep_n is not None and kept > keep_n) or (keep_t is not None and kept_tokens > keep_t):
            break
        if trigger is not None and policy.crosses(kept_tokens + tools_tokens, trigger):
            break
        if entries[index].starts_group:
            cut = index
    # The newest group is always kept: the model must see the turn it answers.
    newest = next((i for i in range(count - 1, -1, -1) if entries[i].starts_group), 0)
    cut = min(cut, newest)
    if open_group_index is not None:
        cut = min(cut, open_group_index)
    if cut <= 0:
        return None
    return PlannedRange(
        limit=limit,
        unsummarized_messages=count,
        unsummarized_tokens=tokens,
        from_position=entries[0].position,
        through_position=entries[cut - 1].position,
        from_version=entries[0].version,
        through_version=entries[cut - 1].version,
    )


def trigger_limit(
    policy: ReductionPolicy, count: int, tokens: int, tools_tokens: int, *, summarized: bool = False
) -> Limit | None:
    """Which trigger ``count`` unsummarized messages of ``tokens`` tokens (sent with
    tool definitions of ``tools_tokens``) cross; None: neither. ``summarized``: a
    summary stands already (``summarize_every`` then sets the message trigger)."""
    at = policy.message_trigger(summarized)
    by_messages = at is not None and policy.crosses(count, at)
    by_tokens = tokens_fire(policy, tokens, tools_tokens)
    if by_messages and by_tokens:
        return "messages+tokens"
    if by_messages:
        return "messages"
    return "tokens" if by_tokens else None


def tokens_fire(policy: ReductionPolicy, message_tokens: int, tools_tokens: int) -> bool:
    """Whether the token trigger fires: the unsummarized messages and the tool
    definitions sent with them cost more than ``trigger_tokens`` (or reach it, when
    ``trigger_when`` is ``reached``)."""
    trigger = policy.trigger_tokens
    return trigger is not None and policy.crosses(message_tokens + tools_tokens, trigger)


def tools_leave_room(policy: ReductionPolicy, tools_tokens: int) -> bool:
    """Whether the token trigger can settle with these tools: the kept window
    (``keep_tokens``) plus the tools must stay at or below ``trigger_tokens``, or every
    summary would leave the trigger crossed and fire again at once."""
    if policy.trigger_tokens is None or not tools_tokens:
        return True
    return (policy.keep_tokens or 0) + tools_tokens < policy.trigger_tokens


def placeholder_text(tool_name: str | None, tokens: int, position: int) -> str:
    """The short text that replaces an old tool result in the working memory."""
    name = tool_name or "tool"
    return f"[{name} result omitted from context: {tokens} tokens, message {position}]"


def placeholder_message(entry: Entry) -> Message:
    """The tool message shown instead of ``entry`` (same call id, so pairing holds)."""
    return Message(
        role="tool",
        tool_call_id=entry.message.tool_call_id,
        content=placeholder_text(entry.tool_name, entry.tokens, entry.position),
    )


def summary_message(from_position: int, through_position: int, text: str) -> Message:
    """How a summary is shown to the model: a system message after the system prompt."""
    return Message(
        role="system",
        content=(
            f"Summary of the earlier conversation (messages {from_position}-{through_position}):\n{text}"
        ),
    )
