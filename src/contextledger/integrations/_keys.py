"""Session ids -> conversations, shared by the integrations.

A session id is the conversation's string key (``Ledger.get_or_start``: the id is
``uuid5(KEY_NAMESPACE, session_id)``); a session id that is itself a UUID names the
conversation with that id.
"""

from __future__ import annotations

import contextlib
from typing import Any
from uuid import UUID

from contextledger.application.ledger import Ledger
from contextledger.domain.errors import DuplicateConversationError

__all__ = ["conversation_for_session"]


def conversation_for_session(ledger: Ledger, session_id: str, **start_args: Any) -> UUID:
    """The conversation of ``session_id``, started with ``start_args`` if it is new."""
    try:
        cid = UUID(session_id)
    except ValueError:
        return ledger.get_or_start(session_id, **start_args)
    with contextlib.suppress(DuplicateConversationError):
        ledger.start(conversation_id=cid, **start_args)
    return cid
