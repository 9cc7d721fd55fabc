"""``decode``: whatever a caller hands ``append``, as the chat messages it stands for.

The adapters of ``ADAPTERS`` are asked in order whether an object is unmistakably in
their format (``accepts``); the first that says yes decodes it. What none claims is
decoded by the Chat Completions adapter, the default, which refuses what is not a
chat message either. Each adapter is visited once; the usual turn,
``{"role": ..., "content": "..."}``, is decoded before any is asked.
"""

from __future__ import annotations

from typing import Any

from contextledger.application.formats.base import Decoded, InboundAdapter
from contextledger.application.formats.openai_chat import OPENAI_CHAT, plain_text_message
from contextledger.application.formats.responses import RESPONSES

__all__ = ["ADAPTERS", "DEFAULT", "decode"]

#: The formats ``decode`` recognises besides Chat Completions, asked in this order,
#: one per line: a new format is one module holding an ``InboundAdapter`` and one
#: line here (ahead of a format that would also accept its objects).
ADAPTERS: list[InboundAdapter] = [
    RESPONSES,
]

#: What decodes (or refuses) whatever no adapter of ``ADAPTERS`` accepts.
DEFAULT: InboundAdapter = OPENAI_CHAT


def decode(obj: Any) -> Decoded:
    """The chat messages ``obj`` stands for, their originals, and the usage reported
    with it; ``InvalidMessageError`` (or ``InvalidArgumentError``) if it is malformed."""
    message = plain_text_message(obj)
    if message is not None:
        return Decoded.one(message)
    for adapter in ADAPTERS:
        if adapter.accepts(obj):
            return adapter.decode(obj)
    return DEFAULT.decode(obj)
