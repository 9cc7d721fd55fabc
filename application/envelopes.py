"""Messages with envelopes: a framework's own lossless record kept beside each message.

An integration whose framework has richer messages than OpenAI's chat format (Pydantic
AI's ``ModelMessage``: timestamps, usage, thinking, provider details) appends the chat
``Message`` the ledger counts, summarizes and sends, together with an *envelope*: a
JSON object the ledger stores verbatim on ``MessageAppended.envelope`` and chains into
the message's digest. These functions append such pairs and read them back, as the
full log or as the working memory (summaries and placeholders applied, exactly as
``context()`` renders it).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from uuid import UUID

from contextledger.domain.conversation import Conversation
from contextledger.domain.errors import InvalidArgumentError
from contextledger.domain.events import MessageAppended
from contextledger.domain.messages import Message
from contextledger.domain.reduction import placeholder_message
from contextledger.domain.state import is_placeholder

if TYPE_CHECKING:
    from contextledger.application.ledger import Ledger

__all__ = ["EnvelopedMemory", "Shown", "append_enveloped", "enveloped_memory", "enveloped_transcript"]

Envelope = dict[str, Any]


@dataclass(frozen=True)
class Shown:
    """One message of the working memory: what the model is sent, and where it came from.

    ``envelope`` is None for the system prompt and summaries (``kind`` says which) and
    for messages appended without one; ``kind`` is ``"message"``, ``"placeholder"`` (an
    old tool result shown as a short stand-in), ``"system_prompt"`` or ``"summary"``.
    """

    message: Message
    envelope: Envelope | None
    kind: str
    position: int | None = None


@dataclass(frozen=True)
class EnvelopedMemory:
    """The working memory at one aggregate version, message by message."""

    shown: list[Shown]
    version: int


def append_enveloped(
    ledger: Ledger, conversation_id: UUID, records: Sequence[tuple[Message, Envelope | None]]
) -> list[int]:
    """Append ``(message, envelope)`` pairs in one transaction (all or nothing); returns
    their positions."""
    frozen: list[tuple[Message, Envelope | None]] = []
    for index, (message, envelope) in enumerate(records):
        if envelope is not None:
            try:
                if not isinstance(envelope, dict):
                    raise TypeError(f"an envelope is a JSON object, not {type(envelope).__name__}")
                json.dumps(envelope, allow_nan=False, ensure_ascii=False).encode("utf-8")
            except (TypeError, ValueError) as exc:
                raise InvalidArgumentError(
                    f"records[{index}]: the envelope is not a JSON object of valid text: {exc}",
                    argument="envelope",
                ) from None
            envelope = copy.deepcopy(envelope)
        frozen.append((message, envelope))
    if not frozen:
        return []

    def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
        positions = []
        for message, envelope in frozen:
            conversation.check_message(message)
            tokens, placeholder_tokens = ledger.counters.message_cost(conversation, message)
            positions.append(
                conversation.append(
                    message,
                    tokens=tokens,
                    placeholder_tokens=placeholder_tokens,
                    client_message_id=None,
                    at=ledger._clock(),
                    envelope=envelope,
                )
            )
        return positions, []

    return ledger.store.execute(conversation_id, command)


def enveloped_transcript(ledger: Ledger, conversation_id: UUID) -> list[tuple[Message, Envelope | None]]:
    """Every message ever appended with its envelope, oldest first (edits and
    retractions do not change what was appended)."""
    return [
        (event.message, copy.deepcopy(event.envelope))
        for event in ledger.store.events(conversation_id)
        if isinstance(event, MessageAppended)
    ]


def memory_of(conversation: Conversation) -> EnvelopedMemory:
    """The working memory of ``conversation`` (``Conversation.working_memory``, with
    each message's envelope and kind)."""
    messages, _ = conversation.working_memory()
    entries = conversation.visible_entries()
    s = conversation.state
    shown: list[Shown] = []
    index = 0
    for number, message in enumerate(messages):
        entry = entries[index] if index < len(entries) else None
        if entry is not None and message is entry.message:
            shown.append(Shown(message, copy.deepcopy(entry.envelope), "message", entry.position))
            index += 1
        elif entry is not None and is_placeholder(s, entry) and message == placeholder_message(entry):
            shown.append(Shown(message, copy.deepcopy(entry.envelope), "placeholder", entry.position))
            index += 1
        elif number == 0 and s.system_prompt is not None and message.content == s.system_prompt:
            shown.append(Shown(message, None, "system_prompt"))
        else:
            shown.append(Shown(message, None, "summary"))
    return EnvelopedMemory(shown=shown, version=conversation.version)


def enveloped_memory(
    ledger: Ledger, conversation_id: UUID, *, version: int | None = None
) -> EnvelopedMemory:
    """What the model is sent next (or was sent at aggregate ``version``)."""
    if version is not None:
        return memory_of(ledger.conversation(conversation_id, version=version))
    return ledger.store.read(conversation_id, memory_of)
