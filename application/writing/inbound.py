"""What ``append`` takes today: OpenAI-format dicts, ``Message``, and the openai SDK's
``ChatCompletionMessage`` and ``ChatCompletion`` (its first choice's message and the
usage the provider reported), decoded by ``formats.openai_chat`` in one pass.

``inbound`` is the single-message form the ledger's ``append`` and ``extend`` use;
``formats.inbound.decode`` is the general one (every registered format, several
messages per object, their originals and items).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from contextledger.application.formats.base import ProviderUsage
from contextledger.application.formats.openai_chat import ALWAYS_DROPPED, DROPPED_WHEN_NONE, chat_message
from contextledger.domain.values.messages import Message

__all__ = ["ALWAYS_DROPPED", "DROPPED_WHEN_NONE", "Inbound", "ProviderUsage", "inbound"]


@dataclass(frozen=True)
class Inbound:
    """A message to append, with the provider's usage when a whole completion came in."""

    message: Message
    usage: ProviderUsage | None = None


def inbound(obj: Any) -> Inbound:
    """Convert whatever ``append`` was given into a ``Message`` (and usage, if any)."""
    message, usage = chat_message(obj)
    return Inbound(message, usage)
