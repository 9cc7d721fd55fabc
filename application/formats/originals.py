"""Messages kept with the framework's own form of them (``MessageAppended.original``).

An integration that must give back exactly what it was handed (LangChain messages
with their ids, metadata, artifacts and content blocks) appends each message with an
``original``: a JSON object in the framework's own form, whose ``"format"`` names the
framework. It is stored in the same event as the chat-completions ``Message`` the
model is sent, covered by the digest chain, and never sent to the model.

``context_entries`` reads the working memory with each message's original (None for
the system prompt, summaries and messages appended without one) and whether the
policy reduced the message to a placeholder; ``transcript_originals`` gives every
appended message with its original, oldest first.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from contextledger.application.formats.items import ItemsHost
from contextledger.application.shared.addressing import ConversationRef, resolve
from contextledger.application.shared.limits import check_message_tokens
from contextledger.application.shared.settings import Settings
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import MessageAppended
from contextledger.domain.folding.queries import is_placeholder
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError, MessageTooLargeError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import Entry, summary_message

__all__ = [
    "NATIVE_FORMAT",
    "ContextEntry",
    "OriginalsHost",
    "WorkingEntries",
    "check_original",
    "context_entries",
    "entries_of",
    "extend_with_originals",
    "transcript_originals",
]


class OriginalsHost(ItemsHost, Protocol):
    """What appending and reading originals needs of the ledger: what the items need,
    and its settings (the size limits)."""

    @property
    def settings(self) -> Settings: ...


#: The ``"format"`` of the original a native summary's context entry carries:
#: ``{"format": NATIVE_FORMAT, "native": "anthropic", "payload": [...blocks]}``.
NATIVE_FORMAT = "native-compaction"


@dataclass(frozen=True)
class ContextEntry:
    """One message of the working memory and the original it was appended with."""

    #: The message as ``Ledger.context`` gives it (OpenAI format).
    message: dict[str, Any]
    #: The framework's own form of it (None: the system prompt, a summary of
    #: contextledger's own, or a message appended without one; a provider's
    #: compaction: its ``NATIVE_FORMAT`` original).
    original: dict[str, Any] | None
    #: True when a placeholder stands for the message (an old tool result).
    reduced: bool
    #: Its position in the log (None: the system prompt or a summary).
    position: int | None


@dataclass(frozen=True)
class WorkingEntries:
    """The working memory as ``ContextEntry`` values, at one aggregate version."""

    entries: list[ContextEntry]
    version: int
    #: How many of the last ``entries`` are the open tool-call group (read with
    #: ``pending=True``; 0 otherwise, or when no call is waiting).
    pending: int = 0


def check_original(original: Any, *, limit: int) -> dict[str, Any]:
    """A deep copy of ``original`` if it is a JSON object with a string ``"format"``
    and at most ``limit`` bytes as JSON; ``InvalidMessageError`` otherwise."""
    if not isinstance(original, dict) or not isinstance(original.get("format"), str):
        raise InvalidMessageError(
            'an original must be a JSON object with a string "format"', field="original"
        )
    try:
        size = len(json.dumps(original, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise InvalidMessageError(
            f"the original is not JSON of valid text: {exc}", field="original"
        ) from None
    if size > limit:
        raise MessageTooLargeError(
            f"the original is {size} bytes, over max_message_bytes ({limit})",
            field="original",
            limit=limit,
            size=size,
            unit="bytes",
            setting="max_message_bytes",
        )
    copied: dict[str, Any] = json.loads(json.dumps(original))
    return copied


def extend_with_originals(
    ledger: OriginalsHost,
    conversation_id: ConversationRef,
    pairs: Iterable[tuple[Message | dict[str, Any], dict[str, Any]]],
    *,
    hidden_call_ids: Collection[str] = (),
) -> list[int]:
    """Append messages, each with its original, in one transaction; returns their
    positions. Nothing is written when any of them is refused. The tool results of
    ``hidden_call_ids`` are hidden from the model (``Ledger.append(..., hidden=True)``)."""
    cid = resolve(conversation_id)
    if isinstance(pairs, str | bytes | dict) or not isinstance(pairs, Iterable):
        raise InvalidArgumentError("pairs must be a list of (message, original)", argument="pairs")
    limit = ledger.settings.max_message_bytes
    checked: list[tuple[Message, dict[str, Any]]] = []
    for pair in pairs:
        if not isinstance(pair, tuple) or len(pair) != 2:
            raise InvalidArgumentError("pairs must be a list of (message, original)", argument="pairs")
        checked.append((Message.from_openai(pair[0]), check_original(pair[1], limit=limit)))
    if not checked:
        return []

    def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
        positions = []
        for message, original in checked:
            conversation.check_message(message)
            tokens, placeholder_tokens = ledger.counters.message_cost(conversation, message)
            check_message_tokens(tokens, ledger.settings)
            positions.append(
                conversation.append(
                    message,
                    tokens=tokens,
                    placeholder_tokens=placeholder_tokens,
                    client_message_id=None,
                    at=ledger.clock(),
                    original=original,
                    hidden=message.role == "tool" and message.tool_call_id in hidden_call_ids,
                )
            )
        return positions, []

    return ledger.store.execute(cid, command)


def entries_of(conversation: Conversation, *, pending: bool = False) -> WorkingEntries:
    """The working memory of ``conversation`` with each message's original; with
    ``pending``, followed by the open tool-call group (the assistant's calls not all
    answered yet, and the answers so far), as a run that stopped for an approval
    leaves it."""
    messages, _ = conversation.working_memory()
    visible = conversation.visible_entries()
    # By object, in order: one Message object may stand at several positions.
    shown: dict[int, list[Entry]] = {}
    placeholders: dict[str | None, list[Entry]] = {}
    for shown_entry in visible:
        if is_placeholder(conversation.state, shown_entry):
            placeholders.setdefault(shown_entry.message.tool_call_id, []).append(shown_entry)
        else:
            shown.setdefault(id(shown_entry.message), []).append(shown_entry)
    native = {
        summary_message(layer.from_position, layer.through_position, layer.text).content: layer
        for layer in conversation.state.summaries
        if layer.native is not None
    }
    out: list[ContextEntry] = []
    for message in messages:
        same = shown.get(id(message))
        entry: Entry | None = same.pop(0) if same else None
        reduced = False
        waiting = placeholders.get(message.tool_call_id) if message.role == "tool" else None
        if entry is None and waiting:
            entry, reduced = waiting.pop(0), True
        if entry is None:
            layer = native.get(message.content) if message.role in ("system", "user") else None
            mark = None if layer is None else _native_original(layer.native, layer.payload)
            out.append(ContextEntry(message.to_openai(), mark, False, None))
        else:
            original = copy.deepcopy(entry.original)
            out.append(ContextEntry(message.to_openai(), original, reduced, entry.position))
    s = conversation.state
    group = s.window[s.open_group_index :] if pending and s.open_group_index is not None else []
    for unanswered in group:
        original = copy.deepcopy(unanswered.original)
        out.append(ContextEntry(unanswered.message.to_openai(), original, False, unanswered.position))
    return WorkingEntries(out, conversation.version, len(group))


def _native_original(native: str | None, payload: Any) -> dict[str, Any]:
    return {"format": NATIVE_FORMAT, "native": native, "payload": copy.deepcopy(list(payload or ()))}


def context_entries(
    ledger: OriginalsHost,
    conversation_id: ConversationRef,
    *,
    version: int | None = None,
    pending: bool = False,
) -> WorkingEntries:
    """What the model is sent next (or was sent at aggregate ``version``), each message
    with its original: the messages are exactly ``ledger.context(cid, version=...)``,
    followed with ``pending`` by the open tool-call group (see ``entries_of``)."""
    cid = resolve(conversation_id)
    if version is not None:
        return entries_of(ledger.conversation(cid, version=version), pending=pending)
    return ledger.store.read(cid, lambda conversation: entries_of(conversation, pending=pending))


def transcript_originals(
    ledger: OriginalsHost, conversation_id: ConversationRef
) -> list[tuple[int, dict[str, Any], dict[str, Any] | None]]:
    """Every message this conversation's log appended, oldest first, as
    ``(position, message, original)`` (edits and retractions are not applied)."""
    cid: UUID = resolve(conversation_id)
    out: list[tuple[int, dict[str, Any], dict[str, Any] | None]] = []
    for event in ledger.store.events(cid):
        if isinstance(event, MessageAppended):
            out.append((event.position, event.message.to_openai(), copy.deepcopy(event.original)))
    return out
