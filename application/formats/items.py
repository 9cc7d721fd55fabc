"""The ledger in Responses format: append items, read the working memory as items.

The ``Ledger`` façade calls these functions (``append_items``, ``context_items``,
``transcript_items``), itself their ``ItemsHost``. Items are grouped into chat
messages by ``domain.values.items``; each stored ``MessageAppended`` keeps the raw items it
stands for, so the working memory is rendered back into the very items that were
appended — the system prompt and the summary as message items, old tool outputs as
placeholder ``function_call_output`` items with the same ``call_id``, exactly as
``context()`` renders chat messages.

A rendering first shares the conversation's own item dicts, then hands the caller a
copy of the whole (``private_items``: one ``marshal`` round trip, the items being JSON
data, instead of a ``deepcopy`` per item); an ``ItemsView`` keeps the last rendering
of a conversation and hands out copies of it until the conversation changes.
"""

from __future__ import annotations

import copy
import marshal
import weakref
from collections.abc import Callable, Collection, Iterable
from datetime import datetime
from typing import Any, Literal, Protocol
from uuid import UUID

from contextledger.application.formats.native import sendable
from contextledger.application.formats.responses import grouped_items
from contextledger.application.shared.counting import TokenCounters
from contextledger.application.storage.store import ConversationStore
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import MessageAppended
from contextledger.domain.folding.queries import is_placeholder
from contextledger.domain.values.errors import InvalidArgumentError
from contextledger.domain.values.items import Item, items_from_message
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import Entry, placeholder_message, summary_message
from contextledger.domain.values.validation import shown

__all__ = [
    "ItemsHost",
    "ItemsView",
    "SummaryRole",
    "append_grouped",
    "append_items",
    "context_items",
    "entry_items",
    "grouped_items",
    "items_of_conversation",
    "private_items",
    "shared_items",
    "transcript_items",
]

#: The role of the message item that carries the summary.
SummaryRole = Literal["system", "developer", "user"]


class ItemsHost(Protocol):
    """What the items need of the ledger: its conversations, token counters and
    clock, and a conversation as it stood at a version."""

    @property
    def store(self) -> ConversationStore: ...

    @property
    def counters(self) -> TokenCounters: ...

    @property
    def clock(self) -> Callable[[], datetime]: ...

    def conversation(self, conversation_id: UUID, *, version: int | None = None) -> Conversation:
        """A private copy of the conversation (at ``version``)."""
        ...


def append_grouped(
    ledger: ItemsHost,
    conversation: Conversation,
    message: Message,
    raw: tuple[Item, ...],
    hidden_call_ids: Collection[str] = (),
) -> int:
    """Append one grouped message with its items to ``conversation`` (in a command); a
    tool result answering one of ``hidden_call_ids`` is hidden from the model. The
    aggregate's ``append`` checks that the message can come next (no check here too)."""
    tokens, placeholder_tokens = ledger.counters.message_cost(conversation, message)
    return conversation.append(
        message,
        tokens=tokens,
        placeholder_tokens=placeholder_tokens,
        client_message_id=None,
        at=ledger.clock(),
        items=raw,
        hidden=message.role == "tool" and message.tool_call_id in hidden_call_ids,
    )


def append_items(ledger: ItemsHost, conversation_id: UUID, items: Iterable[Item]) -> list[int]:
    """Append Responses items in one transaction; returns the positions of the chat
    messages they became (a run of function calls is one message)."""
    frozen = grouped_items(items)
    if not frozen:
        return []

    def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
        return [append_grouped(ledger, conversation, m, raw) for m, raw in frozen], []

    return ledger.store.execute(conversation_id, command)


def _entry_shared(conversation: Conversation, entry: Entry) -> Iterable[Item]:
    """The items one window entry is sent as, its own item dicts shared (not copied)."""
    if is_placeholder(conversation.state, entry):
        text = placeholder_message(entry).text
        outputs = [i for i in entry.items or () if i.get("type") == "function_call_output"]
        if len(outputs) == 1:
            return [{**outputs[0], "output": text}]
        return items_from_message(placeholder_message(entry))
    if entry.items is not None:
        return entry.items
    return items_from_message(entry.message)


def entry_items(conversation: Conversation, entry: Entry) -> list[Item]:
    """The items one window entry is sent as: its own items, its placeholder's, or
    its chat form converted (the caller's own copy)."""
    return private_items(list(_entry_shared(conversation, entry)))


def shared_items(conversation: Conversation, *, summary_role: SummaryRole = "system") -> list[Item]:
    """The working memory of ``conversation`` as Responses items that share the
    conversation's own item dicts: for ``private_items`` to copy, never to hand out."""
    s = conversation.state
    out: list[Item] = []
    if s.system_prompt is not None:
        out.extend(items_from_message(Message(role="system", content=s.system_prompt)))
    for layer in s.summaries:
        if layer.native == "responses" and layer.payload:  # OpenAI's own compaction, as it came
            out.extend(sendable(layer.payload))
            continue
        text = summary_message(layer.from_position, layer.through_position, layer.text).text
        out.append({"type": "message", "role": summary_role, "content": text})
    for entry in conversation.visible_entries():
        out.extend(_entry_shared(conversation, entry))
    return out


def _marshalled(items: list[Item]) -> bytes | None:
    """``items`` marshalled, or None when they hold an object ``marshal`` refuses (any
    class of its own: a dict subclass, an enum, a datetime). Items are JSON data
    (checked as they are appended, or read from the log), which ``marshal`` gives back
    exactly; it would only turn a buffer (a ``bytearray``) into ``bytes``, and no
    stored item holds one."""
    try:
        return marshal.dumps(items)
    except ValueError:
        return None


def private_items(items: list[Item]) -> list[Item]:
    """A deep copy of ``items`` (JSON data: dicts, lists, strings, numbers), made in
    one ``marshal`` round trip; ``copy.deepcopy`` for anything ``marshal`` refuses."""
    blob = _marshalled(items)
    if blob is None:
        return copy.deepcopy(items)
    copied: list[Item] = marshal.loads(blob)
    return copied


def items_of_conversation(conversation: Conversation, *, summary_role: SummaryRole = "system") -> list[Item]:
    """The working memory of ``conversation`` as Responses items (the caller's own copy)."""
    return private_items(shared_items(conversation, summary_role=summary_role))


class ItemsView:
    """The last rendering of one conversation's items, handed out again (a fresh copy
    each time) while the conversation has not changed: the same cached ``Conversation``
    object at the same version, rendered with the same ``key`` (e.g. the summary
    role). A conversation loaded afresh (evicted, erased since, reloaded) is another
    object, so it is rendered again. Safe across threads: the rendering is replaced
    as a whole."""

    def __init__(self) -> None:
        self._last: tuple[weakref.ref[Conversation], int, object, bytes] | None = None

    def items(
        self, conversation: Conversation, key: object, render: Callable[[Conversation], list[Item]]
    ) -> list[Item]:
        """``render(conversation)`` (items that may share the conversation's own
        dicts), as a private copy: from the last rendering when it still holds.
        Call it under the conversation's lock (a store read)."""
        last = self._last
        if (
            last is not None
            and last[0]() is conversation
            and last[1] == conversation.version
            and last[2] == key
        ):
            copied: list[Item] = marshal.loads(last[3])
            return copied
        shared = render(conversation)
        blob = _marshalled(shared)
        if blob is None:
            self._last = None
            return copy.deepcopy(shared)
        self._last = (weakref.ref(conversation), conversation.version, key, blob)
        fresh: list[Item] = marshal.loads(blob)
        return fresh


def context_items(
    ledger: ItemsHost,
    conversation_id: UUID,
    *,
    version: int | None = None,
    summary_role: SummaryRole = "system",
) -> list[Item]:
    """What the model is sent next (or was sent at aggregate ``version``), as items."""
    if summary_role not in ("system", "developer", "user"):
        raise InvalidArgumentError(
            "summary_role must be 'system', 'developer' or 'user'",
            argument="summary_role",
            value=shown(summary_role),
        )
    if version is not None:
        past = ledger.conversation(conversation_id, version=version)
        return items_of_conversation(past, summary_role=summary_role)
    return ledger.store.read(conversation_id, lambda c: items_of_conversation(c, summary_role=summary_role))


def transcript_items(ledger: ItemsHost, conversation_id: UUID) -> list[Item]:
    """Every item ever appended, oldest first (chat messages converted to items)."""
    out: list[Item] = []
    for event in ledger.store.events(conversation_id):
        if isinstance(event, MessageAppended):
            out.extend(event.items if event.items is not None else items_from_message(event.message))
    return private_items(out)
