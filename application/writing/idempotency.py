"""Client message ids: a retried append returns the original position; an id reused
for a different message is refused.

An append with a ``client_message_id`` saves a ``ClientMessageId`` record (a tiny
aggregate with a deterministic id) in the same transaction as its ``MessageAppended``.
A second append with that id collides with the record, and is then compared with what
the log holds at the recorded position: the same message (the same canonical JSON,
what the digest chain covers) is a retry and gets the original position; another
message is an ``IdempotencyConflictError``, and nothing of it is written. The
comparison reads the log, so it holds whichever process appended the original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any, TypeVar
from uuid import UUID

from contextledger.application.storage.store import ConversationStore, store_errors
from contextledger.domain.client_ids import ClientMessageId
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import MessageAppended
from contextledger.domain.values.errors import IdempotencyConflictError, InvalidArgumentError, UsageError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.validation import check_text, shown

__all__ = [
    "MAX_CLIENT_MESSAGE_ID_LENGTH",
    "appended_at",
    "check_client_message_id",
    "check_client_message_ids",
    "execute_once",
    "id_records",
]

T = TypeVar("T")

MAX_CLIENT_MESSAGE_ID_LENGTH = 200
#: Events read per query while looking for a position's ``MessageAppended``.
_PAGE = 64


def check_client_message_id(value: Any, argument: str = "client_message_id") -> str:
    """A valid client message id (a non-blank string of 1 to 200 characters, valid
    Unicode), or ``InvalidArgumentError``."""
    check_text(value, argument, empty=False)
    if len(value) > MAX_CLIENT_MESSAGE_ID_LENGTH:
        raise InvalidArgumentError(
            f"{argument} must be 1 to {MAX_CLIENT_MESSAGE_ID_LENGTH} characters", argument=argument
        )
    return str(value)


def check_client_message_ids(values: Any, count: int) -> list[str | None]:
    """One client message id (or None) per message of an ``extend``; ids unique."""
    if values is None:
        return [None] * count
    if isinstance(values, str | bytes | dict) or not isinstance(values, Sequence):
        raise InvalidArgumentError(
            "client_message_ids must be a list with one id (or None) per message",
            argument="client_message_ids",
            value=shown(values),
        )
    if len(values) != count:
        raise InvalidArgumentError(
            f"client_message_ids has {len(values)} entries for {count} messages",
            argument="client_message_ids",
        )
    ids = [None if v is None else check_client_message_id(v, "client_message_ids") for v in values]
    given = [i for i in ids if i is not None]
    if len(set(given)) != len(given):
        raise InvalidArgumentError("client_message_ids names one id twice", argument="client_message_ids")
    return ids


def id_records(
    conversation_id: UUID, ids: Sequence[str | None], positions: Sequence[int], *, at: datetime
) -> list[Any]:
    """The ``ClientMessageId`` records to save with the messages at ``positions``."""
    return [
        ClientMessageId.record(conversation_id, client_id, position, at=at)
        for client_id, position in zip(ids, positions, strict=True)
        if client_id is not None
    ]


def execute_once(
    store: ConversationStore,
    conversation_id: UUID,
    command: Callable[[Conversation], tuple[list[int], list[Any]]],
    ids: Sequence[str | None],
    messages: Sequence[Message],
) -> list[int]:
    """``store.execute(command)`` for an append of ``messages`` with client ``ids``:
    a retry of an earlier append returns its positions, an id reused for another
    message raises ``IdempotencyConflictError``."""
    if all(i is None for i in ids):
        return store.execute(conversation_id, command)
    try:
        return store.execute(
            conversation_id, command, on_conflict=lambda: _retried(store, conversation_id, ids, messages)
        )
    except IdempotencyConflictError:
        raise
    except UsageError:
        # The message may no longer fit where the conversation stands now (a tool
        # result whose call was answered by the original): a retry all the same.
        found = _retried(store, conversation_id, ids, messages)
        if found is None:
            raise
        return found


def _retried(
    store: ConversationStore, conversation_id: UUID, ids: Sequence[str | None], messages: Sequence[Message]
) -> list[int] | None:
    """The positions of the earlier append these ids name, if it appended these very
    messages; None if no id was used yet (the conflict was another writer's)."""
    known = {i: store.client_position(conversation_id, i) for i in ids if i is not None}
    used = [(index, i, p) for index, i in enumerate(ids) if i is not None and (p := known[i]) is not None]
    if not used:
        return None
    first_index, first_id, first_position = used[0]
    base = first_position - first_index  # one append's messages got consecutive positions
    for index, (client_id, message) in enumerate(zip(ids, messages, strict=True)):
        named, position = (
            (client_id, known[client_id])
            if client_id is not None and known[client_id] is not None
            else (first_id, first_position)
        )
        stored = appended_at(store, conversation_id, base + index)
        if (
            (client_id is not None and position != base + index)
            or stored is None
            or stored.client_message_id != client_id
            or stored.message.canonical_json() != message.canonical_json()
        ):
            raise IdempotencyConflictError(
                f"client_message_id {named!r} already names a different message (at position "
                f"{position}); a retry must send the same messages with the same ids",
                conversation_id=conversation_id,
                client_message_id=named,
                position=position,
            )
    return [base + index for index in range(len(messages))]


def appended_at(store: ConversationStore, conversation_id: UUID, position: int) -> MessageAppended | None:
    """The conversation's own ``MessageAppended`` at ``position``, read from the log
    (None if it holds none). Messages are appended in position order, so a binary
    search over versions finds it in a few short reads, however long the log."""
    lo, hi = 1, _last_version(store, conversation_id)
    while lo <= hi:
        middle = (lo + hi) // 2
        found = _first_appended(store, conversation_id, after=middle - 1)
        if found is None or found.position > position:
            hi = middle - 1
        elif found.position == position:
            return found
        else:
            lo = found.originator_version + 1
    return None


def _last_version(store: ConversationStore, conversation_id: UUID) -> int:
    with store_errors(conversation_id):
        newest = list(store.app.events.get(conversation_id, desc=True, limit=1))
    return int(newest[0].originator_version) if newest else 0


def _first_appended(store: ConversationStore, conversation_id: UUID, *, after: int) -> MessageAppended | None:
    """The first ``MessageAppended`` above version ``after``."""
    while True:
        with store_errors(conversation_id):
            page = list(store.app.events.get(conversation_id, gt=after, limit=_PAGE))
        for event in page:
            if isinstance(event, MessageAppended):
                return event
        if len(page) < _PAGE:
            return None
        after = page[-1].originator_version
