"""Reading a fork whose inherited history was erased as what is left of it.

A fork of another data subject than its source's keeps its own records when its
source's subject is erased (``domain/remainder.py`` sorts them). The store reads it
through here: ``load_remainder`` folds the remainder into the conversation (raising
the erasure's ``ConversationErasedError`` when nothing of the fork's own is readable:
then it is erased whole), ``remainder`` gives the sorted records.

The fork's model and policy were in its erased first record: a remainder is counted
with ``Ledger.start``'s default model and runs under its default policy, until a
policy of its own stands: the one a fork of another subject restates at its creation
(``Conversation.restate_policy``) or one it changes itself (``change_policy``; a
change made before the erasure stands).
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from eventsourcing.persistence import EventStore

from contextledger.application.shared.limits import DEFAULT_MODEL, DEFAULT_POLICY, with_default_cap
from contextledger.application.storage.store_failures import store_errors
from contextledger.domain.conversation import Conversation
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.remainder import Remainder, fold_remainder, remainder_of
from contextledger.domain.values.errors import ConversationNotFoundError

__all__ = ["load_remainder", "remainder"]


def remainder(events: EventStore[UUID], conversation_id: UUID, version: int | None = None) -> Remainder:
    """The conversation's records sorted as a remainder, through ``version`` (default:
    all); raises ``ConversationErasedError`` when it is not one (erased whole)."""
    with store_errors(conversation_id):
        records: list[Any] = list(events.get(conversation_id, lte=version))
    found = remainder_of(records)
    if found is None:
        first = records[0] if records else None
        if isinstance(first, ErasedEvent):
            raise first.error()
        raise ConversationNotFoundError("no such conversation", conversation_id=conversation_id)
    return found


def load_remainder(
    events: EventStore[UUID], conversation_id: UUID, version: int | None = None
) -> Conversation:
    """The fork as what is left of it (see the module doc)."""
    found = remainder(events, conversation_id, version)
    return fold_remainder(found, model=DEFAULT_MODEL, policy=with_default_cap(DEFAULT_POLICY, DEFAULT_MODEL))
