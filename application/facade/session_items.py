"""Session semantics over Responses items: what an agent framework's session expects
of ``add_items`` and ``pop_item``, kept within the ledger's rules.

- ``append_session_items``: a new turn may follow function calls that were never
  answered (a run stopped to wait for a tool approval, and the next run sent a new
  user message instead of resuming). The open calls are then answered, in the same
  transaction, with an error output saying so (the record ``close_open_tool_calls``
  writes), so the working memory stays valid by OpenAI's rules and the log shows
  that the calls were abandoned. An output that arrives later for such a call (an
  approval resumed after all: the framework ran the tool) replaces the abandoned
  answer as its new version (``MessageEdited``; the log keeps both), so the model
  sees what the tool returned, where the call stands.
- ``session_items``: the working memory as items, followed by the calls still waiting
  for their outputs (the working memory leaves an open group out; a session shows
  it, as one that returns every stored row does, and the Agents SDK leaves
  unanswered calls out of what it sends). ``session_items_now`` gives them only if
  that needs no wait and no full rendering (for a caller on an event loop).
- ``compact_session``: the Agents SDK's compaction session replaces the whole history
  with what ``responses.compact`` returned (the user messages and one opaque
  ``compaction`` item). That is recorded as a native summary of every message not yet
  summarized (``application.formats.native``), its payload the compacted items as they came:
  nothing is retracted, the transcript keeps every item, and ``session_items`` gives
  back the compacted items, then what follows them.
- ``pop_session_item``: removes exactly the newest item and returns it. The ledger's
  ``pop`` retracts a whole tool-call group; the items of the group that stay are
  appended again right after, in the same transaction (a popped output leaves its
  call open, as a session that deletes the newest row does).

No framework is imported here; the integrations call these functions.
"""

from __future__ import annotations

import copy
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any
from uuid import UUID

from contextledger.application.formats.items import (
    ItemsView,
    SummaryRole,
    append_grouped,
    grouped_items,
    open_group_items,
    private_items,
    shared_items,
)
from contextledger.application.formats.native import NativeCompaction, record_native
from contextledger.application.formats.native_readable import readable_now
from contextledger.application.shared.limits import check_message_bytes, check_message_tokens
from contextledger.domain.conversation import Conversation
from contextledger.domain.values.errors import InvalidEditError, InvalidMessageError
from contextledger.domain.values.items import Item, items_from_messages, messages_from_items
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import Entry, placeholder_text

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger

__all__ = [
    "ABANDONED_CALL_OUTPUT",
    "append_session_items",
    "compact_session",
    "pop_session_item",
    "session_items",
    "session_items_now",
]

#: The output recorded for a function call the conversation moved on from.
ABANDONED_CALL_OUTPUT = (
    "error: the tool call was abandoned: the conversation moved on before it was "
    "approved or answered, and it did not run"
)


def _close_open_calls(ledger: Ledger, conversation: Conversation, content: str) -> list[int]:
    return [
        ledger.commands.append_to(
            conversation, Message(role="tool", tool_call_id=call_id, content=content), None
        )
        for call_id in list(conversation.state.open_calls)
    ]


def _abandoned_answer(conversation: Conversation, call_id: str | None, text: str) -> Entry | None:
    """The unsummarized answer that closed ``call_id`` as abandoned, if there is one."""
    for entry in reversed(conversation.state.window):
        m = entry.message
        if m.role == "tool" and m.tool_call_id == call_id:
            return entry if entry.items is None and m.text == text else None
    return None


def _replace_answer(ledger: Ledger, conversation: Conversation, answered: Entry, message: Message) -> None:
    """Record ``message`` as the new version of the abandoned answer (``MessageEdited``:
    the log keeps both; a summary that covered it is invalidated)."""
    check_message_bytes(message, ledger.settings)
    counter = ledger.counter_for(conversation.state.model)
    tokens = counter.count_message(message)
    check_message_tokens(tokens, ledger.settings)
    placeholder = placeholder_text(answered.tool_name, tokens, answered.position)
    conversation.edit(
        answered.position,
        message,
        tokens=tokens,
        placeholder_tokens=counter.count_message(
            Message(role="tool", tool_call_id=message.tool_call_id, content=placeholder)
        ),
        history=ledger._history(conversation),
        at=ledger.clock(),
    )


def append_session_items(
    ledger: Ledger,
    conversation_id: UUID,
    items: Iterable[Item],
    *,
    abandoned_output: str = ABANDONED_CALL_OUTPUT,
    hidden_call_ids: Collection[str] = (),
) -> list[int]:
    """Append Responses items in one transaction, answering open calls that the next
    item does not answer with ``abandoned_output`` first; returns the positions of
    every message appended (those answers included). The outputs of
    ``hidden_call_ids`` are hidden from the model (``Ledger.append(..., hidden=True)``)."""
    if not isinstance(abandoned_output, str) or not abandoned_output.strip():
        raise InvalidMessageError("abandoned_output must be a non-empty string", field="content")
    text = abandoned_output if abandoned_output.lower().startswith("error") else f"error: {abandoned_output}"
    frozen = grouped_items(items)
    if not frozen:
        return []

    def command(conversation: Conversation) -> tuple[list[int], list[Any]]:
        positions: list[int] = []
        for message, raw in frozen:
            s = conversation.state
            if message.role == "tool" and message.tool_call_id not in s.open_calls:
                answered = _abandoned_answer(conversation, message.tool_call_id, text)
                if answered is not None:  # a late output: it replaces the abandoned answer
                    _replace_answer(ledger, conversation, answered, message)
                    positions.append(answered.position)
                    continue
            elif message.role != "tool" and s.open_calls:
                positions.extend(_close_open_calls(ledger, conversation, text))
            positions.append(append_grouped(ledger, conversation, message, raw, hidden_call_ids))
        return positions, []

    return ledger.store.execute(conversation_id, command)


def pop_session_item(ledger: Ledger, conversation_id: UUID) -> Item | None:
    """Remove the newest item and return it (None when no item is left), in one
    transaction: the rest of its tool-call group is appended again."""

    def command(conversation: Conversation) -> tuple[Item | None, list[Any]]:
        try:
            group = conversation.pop(history=ledger._history(conversation), at=ledger.clock())
        except InvalidEditError:  # nothing left to pop
            return None, []
        items = items_from_messages([(e.message, e.items or ()) for e in group])
        if not items:
            return None, []
        for message, raw in messages_from_items(items[:-1]):
            append_grouped(ledger, conversation, message, raw)
        return items[-1], []

    return ledger.store.execute(conversation_id, command)


def session_items(
    ledger: Ledger,
    conversation_id: UUID,
    *,
    summary_role: SummaryRole = "system",
    view: ItemsView | None = None,
) -> list[Item]:
    """The working memory as items, then the items of the open tool-call group (the
    calls not answered yet), verbatim: the caller's own copy. With ``view`` (one per
    session), what did not change since the view's last rendering is not rendered
    again."""

    def read(conversation: Conversation) -> list[Item]:
        if view is None:
            shared = shared_items(conversation, summary_role=summary_role)
            return private_items(shared + open_group_items(conversation))
        return view.items(conversation, summary_role, open_group=True)

    return ledger.store.read(conversation_id, read)


def session_items_now(
    ledger: Ledger, conversation_id: UUID, *, summary_role: SummaryRole, view: ItemsView
) -> list[Item] | None:
    """``session_items`` (with ``view``) if they can be had at once, without waiting:
    None when the conversation is not cached in this process, another call holds its
    lock, or the view would render the working memory in full. The conversation is
    brought up to date from the store first, as ``ConversationStore.read`` does (the
    same lock, the same outage bookkeeping): for a caller that may not block, with a
    store whose reads are local (SQLite, memory)."""
    return ledger.store.read_now(
        conversation_id, lambda conversation: view.cheap_items(conversation, summary_role, open_group=True)
    )


def compact_session(ledger: Ledger, conversation_id: UUID, output: list[Item]) -> bool:
    """Record a session's compaction (``output``: what ``responses.compact`` returned,
    user messages and one ``compaction`` item) as a native summary of every message not
    yet summarized, with a readable summary of them by the conversation's summarizer;
    False (nothing written) when ``output`` is not that, or there is nothing to cover."""
    compactions = [i for i in output if isinstance(i, dict) and i.get("type") == "compaction"]
    rest = [i for i in output if i not in compactions]
    if len(compactions) != 1 or any(
        not isinstance(i, dict) or i.get("role") != "user" or i.get("type", "message") != "message"
        for i in rest
    ):
        return False
    payload = tuple(copy.deepcopy(output))

    defer = ledger.settings.native_readable == "on_demand"
    text = None if defer else readable_now(ledger, conversation_id)

    def command(conversation: Conversation) -> tuple[bool, list[Any]]:
        counter = ledger.counters.for_model(conversation.state.model)
        compaction = NativeCompaction("responses", payload, None, model=conversation.state.model)
        return record_native(conversation, compaction, counter, ledger.clock(), text, defer=defer), []

    return ledger.store.execute(conversation_id, command)
