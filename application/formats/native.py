"""A provider's own compaction, recorded as a summary.

A Responses ``compaction`` item (in a ``Response``'s output, or appended as an item)
and an Anthropic ``compaction`` block (in a reply) stand for everything the request
that produced them held: every message not yet summarized. ``split_compactions``
takes them out of what ``append`` and ``extend`` were given (so no message of the log
is an opaque item or a summary), and ``record_native`` records each as a
``SummaryCreated`` with ``native`` (the provider's format) and ``payload`` (the item or
block exactly as it came), over the range ``Conversation.native_range`` names. The
transcript keeps every message it covers; edits of them invalidate it as they
invalidate any summary; erasure covers its payload as the rest of the event.

Its readable text: Anthropic's summary text; for OpenAI's opaque item, a summary of
the same range made by the conversation's summarizer when the compaction is appended
(the offline summarizer when that one fails), so that every other format has a
summary to send. An Anthropic block with null content (a failed compaction) is
recorded as a failed native attempt (``SummarizationFailed.native``) and the policy's
own summarizer stays in charge.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from contextledger.application.formats.base import sdk_dump
from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.domain.conversation import Conversation, SummaryFailure
from contextledger.domain.events import SummaryProvenance
from contextledger.domain.values.digests import summary_source_digest
from contextledger.domain.values.errors import SummarizerError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import summary_message

__all__ = [
    "NATIVE_PROMPT_VERSION",
    "NativeCompaction",
    "readable_text",
    "record_native",
    "sendable",
    "split_compactions",
]

#: Fields of a Responses compaction item that only come back from the API: left out
#: when the item is sent (``ResponseCompactionItemParam`` has ``type``, ``id`` and
#: ``encrypted_content``).
_OUTPUT_ONLY = ("created_by",)

#: The ``prompt_version`` of a native summary's provenance (``native:<format>``).
NATIVE_PROMPT_VERSION = "native:"


@dataclass(frozen=True)
class NativeCompaction:
    """One compaction a provider made, as it came."""

    #: ``"responses"`` or ``"anthropic"``.
    native: str
    #: The compaction item or block, exactly as the provider gave it.
    payload: tuple[dict[str, Any], ...]
    #: The readable summary the provider gave (Anthropic); None for OpenAI's opaque item.
    text: str | None
    #: True: the provider's compaction failed (Anthropic's null content).
    failed: bool = False
    model: str = ""
    input_tokens: int | None = None
    output_tokens: int | None = None


def _is_compaction(value: Any) -> bool:
    return isinstance(value, dict) and value.get("type") == "compaction"


def _compaction_usage(data: dict[str, Any]) -> tuple[int | None, int | None]:
    usage = data.get("usage")
    for entry in (usage or {}).get("iterations") or [] if isinstance(usage, dict) else []:
        if isinstance(entry, dict) and entry.get("type") == "compaction":
            return entry.get("input_tokens"), entry.get("output_tokens")
    return None, None


def _anthropic(data: dict[str, Any]) -> tuple[Any, list[NativeCompaction]]:
    content = data.get("content")
    if not isinstance(content, list) or not any(_is_compaction(b) for b in content):
        return data, []
    model = str(data.get("model") or "")
    spent = _compaction_usage(data)
    found = []
    for block in content:
        if _is_compaction(block):
            text = block.get("content")
            failed = not isinstance(text, str) or not text.strip()
            found.append(
                NativeCompaction(
                    "anthropic",
                    (copy.deepcopy(block),),
                    None if failed else text,
                    failed=failed,
                    model=model,
                    input_tokens=spent[0],
                    output_tokens=spent[1],
                )
            )
    rest = [b for b in content if not _is_compaction(b)]
    return ({**data, "content": rest} if rest else None), found


def _responses(data: Any, model: str = "") -> tuple[Any, list[NativeCompaction]]:
    if _is_compaction(data):
        return None, [NativeCompaction("responses", (copy.deepcopy(data),), None, model=model)]
    if (
        not isinstance(data, dict)
        or data.get("object") != "response"
        or not isinstance(data.get("output"), list)
    ):
        return data, []
    output = data["output"]
    if not any(_is_compaction(i) for i in output):
        return data, []
    model = str(data.get("model") or "")
    found = [
        NativeCompaction("responses", (copy.deepcopy(i),), None, model=model)
        for i in output
        if _is_compaction(i)
    ]
    rest = [i for i in output if not _is_compaction(i)]
    return {**data, "output": rest}, found


def sendable(payload: Any) -> list[dict[str, Any]]:
    """A copy of a Responses native summary's payload as the API takes it back as input:
    the items as they came, the output-only fields of the compaction item left out."""
    out = []
    for item in copy.deepcopy(list(payload or ())):
        if _is_compaction(item):
            for name in _OUTPUT_ONLY:
                item.pop(name, None)
        out.append(item)
    return out


def split_compactions(obj: Any, native: str) -> tuple[Any, list[NativeCompaction]]:
    """``obj`` (what ``append`` was given, in the ``native`` format) without its
    compaction items or blocks (None when nothing else is left), and the compactions it
    held, in order. An object without one comes back as it was given."""
    if native == "anthropic":
        data = sdk_dump(obj, keep=dict, exclude_none=True)
        if not isinstance(data, dict) or not isinstance(data.get("content"), list):
            return obj, []
        rest, found = _anthropic(data)
        return (rest, found) if found else (obj, [])
    data = sdk_dump(obj, exclude_unset=True)
    rest, found = _responses(data)
    return (rest, found) if found else (obj, [])


def readable_text(
    conversation: Conversation,
    summarizer: Summarizer,
    fallback: Summarizer | None,
    *,
    model: str,
    max_summary_tokens: int,
    counter: TokenCounter | None,
    appended: tuple[Message, ...] = (),
) -> SummaryResult | None:
    """A summary of the messages a native compaction of ``conversation`` would cover
    once ``appended`` are appended (and the summaries before them), by ``summarizer``,
    or by ``fallback`` when it fails; None when there is nothing to cover."""
    s = conversation.state
    covered = conversation.native_range()
    if covered is None and not (appended and s.open_group_index is None):
        return None
    start = covered[0] if covered else max(s.summarized_through + 1, s.erased_before)
    entries = conversation.native_sources(start, s.next_position - 1)
    messages = (*(e.message for e in entries), *appended)
    positions = (*(e.position for e in entries), *range(s.next_position, s.next_position + len(appended)))
    previous = "\n\n".join(layer.text for layer in conversation.state.summaries) or None
    request = SummaryRequest(
        conversation_id=conversation.id,
        from_position=start,
        through_position=s.next_position + len(appended) - 1,
        messages=messages,
        previous_summary=previous,
        model=model,
        max_summary_tokens=max_summary_tokens,
        idempotency_key=f"native:{conversation.id}:{conversation.version}",
        positions=positions,
        token_counter=counter,
    )
    try:
        return summarizer.summarize(request)
    except SummarizerError:
        if fallback is None:
            raise
        return fallback.summarize(request)


def record_native(
    conversation: Conversation,
    compaction: NativeCompaction,
    counter: TokenCounter,
    at: datetime,
    readable: SummaryResult | None = None,
    *,
    defer: bool = False,
) -> bool:
    """Record ``compaction`` on ``conversation`` (inside a command): a native summary
    of every message not yet summarized, with ``readable``'s text for an opaque item
    (``defer``: none yet, made on demand by ``make_readable``); a failed native attempt
    for a failed one. False when it covers nothing (nothing is recorded)."""
    if compaction.failed:
        failure = SummaryFailure(
            kind="native_compaction",
            error=f"the provider's {compaction.native} compaction returned no summary",
            retryable=False,
            called_provider=True,
            input_tokens=compaction.input_tokens,
            output_tokens=compaction.output_tokens,
        )
        conversation.record_native_failure(compaction.native, failure, at=at)
        return True
    covered = conversation.native_range()
    text = compaction.text if compaction.text is not None else (readable.text if readable else "")
    deferred = defer and compaction.text is None and readable is None
    if covered is None or not (text.strip() or deferred):
        return False
    entries = conversation.native_sources(*covered)
    previous = "\n\n".join(layer.text for layer in conversation.state.summaries) or None
    rendered: Message = summary_message(conversation.state.erased_before, covered[1], text.strip())
    conversation.record_native_summary(
        native=compaction.native,
        payload=compaction.payload,
        from_position=covered[0],
        through_position=covered[1],
        text=text.strip(),
        tokens=counter.count_text(text.strip()),
        message_tokens=counter.count_message(rendered),
        source_digest=summary_source_digest(previous, [e.message for e in entries]),
        provenance=SummaryProvenance(
            model=compaction.model or (readable.model if readable else "") or "unknown",
            prompt_version=NATIVE_PROMPT_VERSION + compaction.native,
            input_tokens=compaction.input_tokens,
            output_tokens=compaction.output_tokens,
        ),
        at=at,
    )
    return True
