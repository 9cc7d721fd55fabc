"""The shapes every wire-format adapter shares.

An inbound adapter decodes one object a caller handed ``append`` (a provider's
message param, an SDK reply object, a framework message) into ``Decoded``: the
chat ``Message`` values the aggregate records, each with the lossless original it is
stored with (``MessageAppended.original``; None where the chat form is already
exact), and the usage the provider reported, when the object was a whole reply.
One wire message may decode to several chat messages (an Anthropic user turn with
two ``tool_result`` blocks is two ``tool`` messages); the original that renders the
wire message back rides on the first of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from contextledger.domain.values.errors import InvalidArgumentError
from contextledger.domain.values.messages import Message

__all__ = ["Decoded", "InboundAdapter", "ProviderUsage", "labelled_instruction", "sdk_dump"]


@dataclass(frozen=True)
class ProviderUsage:
    """Token usage a provider reported for one model call.

    ``prompt_tokens`` is every input token the call was billed for, cached ones
    included (Anthropic's ``input_tokens + cache_creation_input_tokens +
    cache_read_input_tokens``; Gemini's ``prompt_token_count``).
    """

    prompt_tokens: int
    completion_tokens: int
    #: Input tokens read from the provider's prompt cache (None: not reported).
    cache_read_tokens: int | None = None
    #: Input tokens written to the provider's prompt cache (None: not reported).
    cache_creation_tokens: int | None = None


@dataclass(frozen=True)
class Decoded:
    """What one inbound object decodes to: messages, their originals, usage."""

    messages: tuple[Message, ...]
    #: One per message: the lossless wire form to store with it, or None.
    originals: tuple[dict[str, Any] | None, ...]
    usage: ProviderUsage | None = None

    def __post_init__(self) -> None:
        if len(self.originals) != len(self.messages):
            raise InvalidArgumentError(
                f"{len(self.messages)} decoded messages with {len(self.originals)} originals",
                argument="originals",
            )

    @classmethod
    def one(
        cls, message: Message, original: dict[str, Any] | None = None, usage: ProviderUsage | None = None
    ) -> Decoded:
        return cls((message,), (original,), usage)


class InboundAdapter(Protocol):
    """One wire format's decoder."""

    #: The format's name (``"openai"``, ``"responses"``, ``"anthropic"``, ``"gemini"``).
    name: str

    def accepts(self, obj: Any) -> bool:
        """True when ``obj`` is unmistakably in this format."""
        ...

    def decode(self, obj: Any) -> Decoded:
        """The chat messages ``obj`` stands for; ``InvalidMessageError`` if malformed."""
        ...


def sdk_dump(obj: Any, *, keep: type | tuple[type, ...] = (), **options: Any) -> Any:
    """An SDK's (pydantic) object as JSON data, ``obj.model_dump(mode="json", **options)``
    (``model_dump()`` where it takes no such options); anything without a
    ``model_dump``, and instances of ``keep``, as it is."""
    dump = getattr(obj, "model_dump", None)
    if not callable(dump) or isinstance(obj, keep):
        return obj
    try:
        return dump(mode="json", **options)
    except TypeError:
        return dump()


def labelled_instruction(role: str, text: str) -> str:
    """The text a system or developer message inside a conversation is rendered as for
    a provider whose turns have no such role (Anthropic, Gemini): in its place, in a
    user turn, marked ``[system]`` or ``[developer]`` ("" for a message of no text)."""
    return f"[{role}] {text}" if text.strip() else ""
