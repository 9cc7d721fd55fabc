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
import operator
import weakref
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass
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
    "open_group_items",
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
    return _head_items(conversation, summary_role, conversation.visible_entries())


def _head_items(conversation: Conversation, summary_role: str, visible: list[Entry]) -> list[Item]:
    """``shared_items`` of these visible entries."""
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
    for entry in visible:
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


def open_group_items(conversation: Conversation) -> list[Item]:
    """The items of the open tool-call group (the calls not answered yet), sharing the
    conversation's own item dicts (the working memory leaves the group out)."""
    s = conversation.state
    if s.open_group_index is None:
        return []
    out: list[Item] = []
    for entry in s.window[s.open_group_index :]:
        out.extend(entry.items if entry.items else items_from_message(entry.message))
    return out


@dataclass(frozen=True)
class _Rendering:
    """One rendering of an ``ItemsView``: what it was rendered from, and the result."""

    conversation: weakref.ref[Conversation]
    version: int
    summary_role: str
    open_group: bool
    system_prompt: str | None
    summaries: tuple[Any, ...]
    placeholder_before: int
    #: The visible entries rendered, and the shared items of the system prompt, the
    #: summaries and those entries (without the open group's).
    entries: tuple[Entry, ...]
    head: list[Item]
    #: The whole rendering, marshalled in pieces: the head's (one per extension, up to
    #: ``MAX_PIECES``, then one again), then the open group's (None: it holds what
    #: ``marshal`` refuses).
    blobs: tuple[bytes, ...] | None


#: Marshalled pieces of a rendering's head before they are marshalled as one again: a
#: change marshals only what it added, and the whole head once in ``MAX_PIECES`` turns.
MAX_PIECES = 16


def _same(a: Sequence[Any], b: Sequence[Any]) -> bool:
    return len(a) == len(b) and all(map(operator.is_, a, b))


class ItemsView:
    """A conversation's working memory as items, kept between calls: the same cached
    ``Conversation`` object at the same version is handed out again (a fresh copy each
    time, from its ``marshal`` pieces); when only entries were appended since (the
    entries rendered before are still there, the same objects, with the same system
    prompt, summaries and placeholder boundary), just the new entries are rendered.
    A conversation loaded afresh (evicted, erased since, reloaded) is another object,
    rendered in full. Call it under the conversation's lock (a store read); it
    replaces its rendering as a whole. ``renders`` and ``extensions`` count full
    renderings and those that added to the last one."""

    def __init__(self) -> None:
        self._last: _Rendering | None = None
        self.renders = 0
        self.extensions = 0

    def items(
        self, conversation: Conversation, summary_role: SummaryRole = "system", *, open_group: bool = False
    ) -> list[Item]:
        """The working memory as items (the caller's own copy), then, with
        ``open_group``, the items of the calls still waiting for their outputs."""
        items = self._items(conversation, summary_role, open_group, full=True)
        assert items is not None
        return items

    def cheap_items(
        self, conversation: Conversation, summary_role: SummaryRole = "system", *, open_group: bool = False
    ) -> list[Item] | None:
        """``items``, or None (nothing done) when they would be rendered in full: the
        conversation is not the one rendered last, or changed otherwise than by new
        entries (a summary, a placeholder boundary moved, an edit)."""
        return self._items(conversation, summary_role, open_group, full=False)

    def _items(
        self, conversation: Conversation, summary_role: SummaryRole, open_group: bool, *, full: bool
    ) -> list[Item] | None:
        s = conversation.state
        last = self._last
        head: list[Item] | None = None
        visible = None
        if (
            last is not None
            and last.conversation() is conversation
            and last.summary_role == summary_role
            and last.open_group == open_group
        ):
            if last.version == conversation.version and last.blobs is not None:
                return _loaded(last.blobs)
            if (
                s.system_prompt == last.system_prompt
                and s.placeholder_before == last.placeholder_before
                and _same(s.summaries, last.summaries)
            ):
                visible = conversation.visible_entries()
                done = len(last.entries)
                if _same(visible[:done], last.entries):
                    head = list(last.head)
                    for entry in visible[done:]:
                        head.extend(_entry_shared(conversation, entry))
                    self.extensions += 1
        pieces: tuple[bytes, ...] | None = None
        if head is None:
            if not full:
                return None
            visible = conversation.visible_entries()
            head = _head_items(conversation, summary_role, visible)
            self.renders += 1
        elif last is not None and last.blobs is not None:  # only the new items marshalled
            piece = _marshalled(head[len(last.head) :])
            if piece is not None and len(last.blobs) <= MAX_PIECES:
                pieces = (*last.blobs[:-1], piece)
        assert visible is not None
        if pieces is None:  # the whole head in one piece
            whole = _marshalled(head)
            pieces = None if whole is None else (whole,)
        group = open_group_items(conversation) if open_group else []
        group_blob = _marshalled(group)
        blobs = None if pieces is None or group_blob is None else (*pieces, group_blob)
        self._last = _Rendering(
            weakref.ref(conversation),
            conversation.version,
            summary_role,
            open_group,
            s.system_prompt,
            tuple(s.summaries),
            s.placeholder_before,
            tuple(visible),
            head,
            blobs,
        )
        if blobs is None:
            return copy.deepcopy(head + group)
        return _loaded(blobs)


def _loaded(blobs: tuple[bytes, ...]) -> list[Item]:
    """The items of marshalled pieces, in order: a fresh copy."""
    out: list[Item] = marshal.loads(blobs[0])
    for blob in blobs[1:]:
        out.extend(marshal.loads(blob))
    return out


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
