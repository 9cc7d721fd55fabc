"""``decode``: whatever a caller hands ``append``, as the chat messages it stands for.

The adapters of ``ADAPTERS`` are asked in order whether an object is unmistakably in
their format (``accepts``); the first that says yes decodes it. What none claims is
decoded by the Chat Completions adapter, the default, which refuses what is not a
chat message either. Each adapter is visited once; the usual turn,
``{"role": ..., "content": "..."}``, is decoded before any is asked.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from contextledger.application.formats.anthropic import AnthropicAdapter
from contextledger.application.formats.base import Decoded, InboundAdapter
from contextledger.application.formats.gemini import GeminiAdapter, OpenCall
from contextledger.application.formats.openai_chat import OPENAI_CHAT, plain_text_message
from contextledger.application.formats.responses import RESPONSES

__all__ = ["ADAPTERS", "ANTHROPIC", "DEFAULT", "GEMINI", "decode"]

#: The Anthropic Messages adapter (ahead of Responses: a reply's dump has a ``type``).
ANTHROPIC = AnthropicAdapter()
#: The Gemini ``Content`` adapter.
GEMINI = GeminiAdapter()

#: The formats ``decode`` recognises besides Chat Completions, asked in this order,
#: one per line: a new format is one module holding an ``InboundAdapter`` and one
#: line here (ahead of a format that would also accept its objects).
ADAPTERS: list[InboundAdapter] = [
    ANTHROPIC,
    GEMINI,
    RESPONSES,
]

#: What decodes (or refuses) whatever no adapter of ``ADAPTERS`` accepts.
DEFAULT: InboundAdapter = OPENAI_CHAT


def decode(
    obj: Any, *, open_calls: Sequence[OpenCall] = (), new_id: Callable[[], str] | None = None
) -> Decoded:
    """The chat messages ``obj`` stands for, their originals, and the usage reported
    with it; ``InvalidMessageError`` (or ``InvalidArgumentError``) if it is malformed.

    ``open_calls`` and ``new_id`` reach the Gemini adapter only (``GeminiAdapter.decode``:
    the conversation's unanswered calls, which function responses without an id
    answer, and the maker of ids for function calls without one)."""
    message = plain_text_message(obj)
    if message is not None:
        return Decoded.one(message)
    for adapter in ADAPTERS:
        if adapter.accepts(obj):
            if adapter is GEMINI:
                return GEMINI.decode(obj, open_calls=open_calls, new_id=new_id)
            return adapter.decode(obj)
    return DEFAULT.decode(obj)
