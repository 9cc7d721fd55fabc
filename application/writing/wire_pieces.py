"""What ``append`` and ``extend`` were given in a provider's wire format, decoded into
the pieces they append: chat messages with their originals or Responses items, the
usage a reply reported, and the compactions the provider made (``native``).

``wire_adapter`` asks the Anthropic, Gemini and Responses adapters once per object;
``decode_wire`` decodes a batch in order: consecutive Responses items are grouped as
``append_items`` groups them, Gemini function responses without an id answer the
conversation's open calls, and each compaction item or block is taken out and kept
with the number of pieces decoded before it (where its summary lands).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID, uuid5

from contextledger.application.formats.base import Decoded, InboundAdapter, ProviderUsage
from contextledger.application.formats.gemini import OpenCall
from contextledger.application.formats.inbound import ANTHROPIC, GEMINI
from contextledger.application.formats.native import NativeCompaction, split_compactions
from contextledger.application.formats.originals import check_original
from contextledger.application.formats.responses import RESPONSES, DecodedItems, decode_items
from contextledger.application.writing.inbound import inbound
from contextledger.domain.values.messages import Message

__all__ = ["Piece", "WireBatch", "decode_wire", "wire_adapter"]


@dataclass(frozen=True)
class Piece:
    """One chat message a wire message decoded to, as it is appended."""

    message: Message
    original: dict[str, Any] | None
    client_id: str | None
    #: The raw Responses items it stands for (None: not appended as items).
    items: tuple[dict[str, Any], ...] | None = None


@dataclass
class WireBatch:
    """A decoded batch: its pieces, the usage the last reply reported, and each
    compaction with the number of pieces that come before it."""

    pieces: list[Piece] = field(default_factory=list)
    usage: ProviderUsage | None = None
    compactions: list[tuple[int, NativeCompaction]] = field(default_factory=list)


def wire_adapter(obj: Any) -> InboundAdapter | None:
    """The Anthropic, Gemini or Responses adapter when one claims ``obj`` (its messages
    come with originals or items, maybe several to one object); None for what
    ``inbound`` takes. Asked once per object: the answer travels with it to the
    decoding."""
    if type(obj) is dict and len(obj) == 2 and type(obj.get("content")) is str and "role" in obj:
        # The usual turn, ``{"role": ..., "content": "..."}``: no adapter claims it (an
        # Anthropic param with text content reads as the chat message; Gemini needs
        # "parts", the Responses format a "type", a reply other keys).
        return None
    if ANTHROPIC.accepts(obj):
        return ANTHROPIC
    if GEMINI.accepts(obj):
        return GEMINI
    if RESPONSES.accepts(obj):
        return RESPONSES
    return None


def _is_reply(obj: Any) -> bool:
    if isinstance(obj, dict):
        return obj.get("object") == "response"
    return getattr(obj, "object", None) == "response"


def _item_run(objs: Sequence[Any], adapters: Sequence[InboundAdapter | None], start: int) -> int:
    """How many objects from ``start`` are single Responses items (not whole replies)
    to be grouped together, as ``append_items`` groups them: a run of function calls is
    one assistant message, reasoning stays with the call it preceded."""
    end = start
    while end < len(objs) and adapters[end] is RESPONSES and not _is_reply(objs[end]):
        end += 1
    return end - start


def _follow_calls(open_calls: list[OpenCall], message: Message) -> None:
    for call in message.tool_calls or ():
        open_calls.append((call.id, call.function.name))
    if message.role == "tool":
        open_calls[:] = [c for c in open_calls if c[0] != message.tool_call_id]


def _id_maker(conversation_id: UUID, client_id: str | None) -> Callable[[], str] | None:
    """Ids for Gemini calls without one: derived from the client message id when there
    is one (a retried append decodes to the same messages), else fresh."""
    if client_id is None:
        return None
    count = iter(range(1 << 30))
    return lambda: f"call_{uuid5(conversation_id, f'{client_id}/{next(count)}').hex}"


class _Decoder:
    def __init__(self, conversation_id: UUID, open_calls: list[OpenCall], limit: int) -> None:
        self.conversation_id = conversation_id
        self.open_calls = open_calls
        self.limit = limit
        self.batch = WireBatch()

    def add(self, decoded: Decoded, client_id: str | None) -> None:
        self.batch.usage = decoded.usage or self.batch.usage
        items = decoded.items if isinstance(decoded, DecodedItems) else (None,) * len(decoded.messages)
        for number, (message, original, raw) in enumerate(
            zip(decoded.messages, decoded.originals, items, strict=True)
        ):
            checked = None if original is None else check_original(original, limit=self.limit)
            self.batch.pieces.append(Piece(message, checked, client_id if number == 0 else None, raw))
            _follow_calls(self.open_calls, message)

    def compactions(self, found: list[NativeCompaction]) -> None:
        self.batch.compactions.extend((len(self.batch.pieces), c) for c in found)

    def run(self, objs: Sequence[Any], client_id: str | None) -> None:
        """Consecutive Responses items, grouped; a compaction item splits the run."""
        group: list[Any] = []
        for obj in objs:
            rest, found = split_compactions(obj, RESPONSES.name)
            if found:
                if group:
                    self.add(decode_items(group), client_id)
                    group, client_id = [], None
                self.compactions(found)
            if rest is not None and not found:
                group.append(RESPONSES.dump(obj))
        if group:
            self.add(decode_items(group), client_id)

    def one(self, obj: Any, adapter: InboundAdapter | None, client_id: str | None) -> None:
        if adapter is None:  # as a plain append or extend takes it (its usage unrecorded)
            self.batch.pieces.append(Piece(inbound(obj).message, None, client_id))
            _follow_calls(self.open_calls, self.batch.pieces[-1].message)
            return
        if adapter is GEMINI:
            new_id = _id_maker(self.conversation_id, client_id)
            self.add(GEMINI.decode(obj, open_calls=self.open_calls, new_id=new_id), client_id)
            return
        rest, found = split_compactions(obj, adapter.name)
        self.compactions(found)
        if rest is not None:
            self.add(adapter.decode(rest), client_id)


def decode_wire(
    conversation_id: UUID,
    objs: Sequence[Any],
    adapters: Sequence[InboundAdapter | None],
    ids: Sequence[str | None],
    *,
    open_calls: list[OpenCall],
    limit: int,
) -> WireBatch:
    """Every chat message ``objs`` stand for, in order, with its original (at most
    ``limit`` bytes) or items and client id (an object's id goes with its first
    message), the usage the last of them reported, and the compactions they held.
    Gemini function responses without an id answer ``open_calls`` (the conversation's),
    and the calls decoded before them."""
    decoder = _Decoder(conversation_id, open_calls, limit)
    index = 0
    while index < len(objs):
        run = _item_run(objs, adapters, index)
        if run > 1 and all(i is None for i in ids[index + 1 : index + run]):
            decoder.run(objs[index : index + run], ids[index])
            index += run
        else:
            decoder.one(objs[index], adapters[index], ids[index])
            index += 1
    return decoder.batch
