"""OpenAI Responses items in: what ``append_items`` and the agent sessions take, and
the openai SDK's ``Response`` objects, decoded in one pass.

The items are read once: each is checked (a JSON object of valid text, string keys)
and copied as the log will give it back, then handed straight on to the grouping
rules of ``domain.values.items`` (a run of function calls is one assistant message, each
output a tool message, unreadable items described), which build each ``Message``
once. Each message keeps the raw items it stands for (``DecodedItems.items``; stored
as ``MessageAppended.items``), so the items are rendered back exactly.

A faulty item is refused with ``InvalidArgumentError`` (not JSON, or text that is
not valid Unicode) or ``InvalidMessageError`` (not an item the grouping rules can
read); the first fault in item order is the one reported, and nothing is written.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from contextledger.application.formats.base import Decoded, ProviderUsage, sdk_dump
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.domain.values.items import Item, ItemMessage, messages_from_items
from contextledger.domain.values.validation import shown

__all__ = ["RESPONSES", "DecodedItems", "ResponsesItems", "decode_items", "grouped_items"]


@dataclass(frozen=True)
class DecodedItems(Decoded):
    """``Decoded`` with, for each message, the raw Responses items it stands for."""

    items: tuple[tuple[Item, ...], ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(self.items) != len(self.messages):
            raise InvalidArgumentError(
                f"{len(self.messages)} decoded messages with {len(self.items)} item groups", argument="items"
            )

    @property
    def grouped(self) -> list[ItemMessage]:
        """Each message with its items, as ``append_grouped`` takes them."""
        return list(zip(self.messages, self.items, strict=True))


def _check_keys(value: Any) -> None:
    if isinstance(value, dict):
        for key, inner in value.items():
            if not isinstance(key, str):
                raise TypeError(f"keys must be strings, not {type(key).__name__} ({key!r:.40})")
            _check_keys(inner)
    elif isinstance(value, list | tuple):
        for inner in value:
            _check_keys(inner)


#: ``json.dumps(..., allow_nan=False, ensure_ascii=False)``, its encoder built once.
_encode = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode


def _as_logged(item: Any) -> Any:
    """A private copy of ``item`` as the log gives it back (JSON: tuples are lists).
    A key that is not a string is refused: JSON would turn it into one (``1`` and
    ``"1"`` would even collapse into one key), so the item read back would differ.
    A copy equal to the item has only string keys (a key JSON turned into a string
    no longer equals its original), so only one that differs (a tuple read back as a
    list, or such a key) is walked to look for them."""
    text = _encode(item)  # refuses cycles first
    text.encode("utf-8")  # no lone surrogates
    copied = json.loads(text)
    if copied != item:
        _check_keys(item)
    return copied


def _all_logged(items: list[Any]) -> list[Item] | None:
    """Every item as the log gives it back, in one round trip for the whole list; None
    when one of them is not a JSON object of valid text (``_checked`` then finds the
    first, in order, as the grouping asks for the items)."""
    if not all(isinstance(item, dict) for item in items):
        return None
    try:
        copied: list[Item] = _as_logged(items)
    except (TypeError, ValueError):
        return None
    return copied


def _checked(items: Iterable[Any]) -> Iterator[Item]:
    """Each item as the log will give it back, in order, as the grouping asks for it."""
    for index, item in enumerate(items):
        try:
            if not isinstance(item, dict):
                raise TypeError(f"an item is an object, not {type(item).__name__}")
            yield _as_logged(item)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"items[{index}] is not a JSON object of valid text: {exc}", argument="items"
            ) from None


def grouped_items(items: Iterable[Item]) -> list[ItemMessage]:
    """Check Responses items (JSON objects of valid text) and group them into chat
    messages, each with a private copy of the items it stands for: one pass."""
    if isinstance(items, str | bytes | dict) or not isinstance(items, Iterable):
        raise InvalidArgumentError(
            "items must be a list of Responses items", argument="items", value=shown(items)
        )
    if isinstance(items, list):  # checked and copied at once when every item is sound
        logged = _all_logged(items)
        if logged is not None:
            return messages_from_items(logged)
    return messages_from_items(_checked(items))


def decode_items(items: Iterable[Item], usage: ProviderUsage | None = None) -> DecodedItems:
    """``grouped_items`` as a ``Decoded`` (the chat form needs no original: the items are kept)."""
    grouped = grouped_items(items)
    return DecodedItems(
        tuple(m for m, _ in grouped), (None,) * len(grouped), usage, tuple(raw for _, raw in grouped)
    )


def _dump(obj: Any) -> Any:
    """An SDK object as the API sent it (the fields it set), the way the Agents SDK
    turns its output items into input items."""
    return sdk_dump(obj, exclude_unset=True)


def _is_response(data: Mapping[str, Any]) -> bool:
    return data.get("object") == "response" and "output" in data


def _usage(data: Mapping[str, Any]) -> ProviderUsage | None:
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    details = usage.get("input_tokens_details")
    details = details if isinstance(details, Mapping) else {}
    read, written = details.get("cached_tokens"), details.get("cache_write_tokens")
    return ProviderUsage(
        prompt,
        completion,
        read if isinstance(read, int) else None,
        written if isinstance(written, int) else None,
    )


class ResponsesItems:
    """The Responses adapter: one item (a mapping with a ``type``, or the SDK's item
    object), or a whole ``Response`` (its ``output`` items and its usage)."""

    name = "responses"

    def accepts(self, obj: Any) -> bool:
        """A mapping with a string ``type`` (no chat message has one) or a response's
        dump; an SDK object with a string ``type`` or a response."""
        if isinstance(obj, Mapping):
            return isinstance(obj.get("type"), str) or _is_response(obj)
        if callable(getattr(obj, "model_dump", None)):
            return isinstance(getattr(obj, "type", None), str) or getattr(obj, "object", None) == "response"
        return False

    def dump(self, obj: Any) -> Any:
        """``obj`` as JSON data: an SDK item as the API sent it (the fields it set)."""
        return _dump(obj)

    def decode(self, obj: Any) -> DecodedItems:
        data = _dump(obj)
        if not isinstance(data, Mapping) or not _is_response(data):
            return decode_items([data])
        output = data.get("output")
        if not isinstance(output, list):
            raise InvalidMessageError("the response's output is not a list of items", field="output")
        return decode_items(output, _usage(data))


#: The one instance the registry holds.
RESPONSES = ResponsesItems()
