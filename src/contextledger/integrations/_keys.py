"""Session ids -> conversations, shared by the integrations.

A session id is the conversation's string key (``Ledger.get_or_start``: the id is
``uuid5(KEY_NAMESPACE, session_id)``); a session id that is itself a UUID names the
conversation with that id.
"""

from __future__ import annotations

import contextlib
from typing import Any
from uuid import UUID

from contextledger.application.facade.ledger import Ledger
from contextledger.application.privacy.subjects import check_subject
from contextledger.domain.values.errors import DuplicateConversationError, InvalidArgumentError
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["SessionBinding", "conversation_for_session"]


def conversation_for_session(ledger: Ledger, session_id: str, **start_args: Any) -> UUID:
    """The conversation of ``session_id``, started with ``start_args`` if it is new."""
    try:
        cid = UUID(session_id)
    except ValueError:
        return ledger.get_or_start(session_id, **start_args)
    with contextlib.suppress(DuplicateConversationError):
        ledger.start(conversation_id=cid, **start_args)
    return cid


class SessionBinding:
    """A framework session bound to one ledger conversation: built from a session id
    and a ``ledger`` (shared, never closed here) or a database ``url`` (opened here,
    closed by ``close()``); the conversation starts on first use, of data subject
    ``subject`` when one is given."""

    def __init__(
        self,
        session_id: str,
        ledger: Ledger | None = None,
        *,
        url: str | None = None,
        policy: ReductionPolicy | None = None,
        model: str = "gpt-4o-mini",
        system_prompt: str | None = None,
        subject: str | None = None,
    ) -> None:
        if not isinstance(session_id, str) or not session_id:
            raise InvalidArgumentError("session_id must be a non-empty string", argument="session_id")
        if ledger is not None and url is not None:
            raise InvalidArgumentError("pass a ledger or a url, not both", argument="url")
        if subject is not None:
            check_subject(subject)
        self.session_id = session_id
        self._owns_ledger = ledger is None
        self.ledger = ledger if ledger is not None else Ledger.open(url)
        self._start_args: dict[str, Any] = {"model": model, "policy": policy, "system_prompt": system_prompt}
        if subject is not None:  # the data subject the session is about (docs/privacy.md)
            self._start_args["subject"] = subject
        self._conversation_id: UUID | None = None

    @property
    def conversation_id(self) -> UUID:
        """The ledger conversation holding this session (started on first use)."""
        if self._conversation_id is None:
            self._conversation_id = conversation_for_session(self.ledger, self.session_id, **self._start_args)
        return self._conversation_id

    def close(self) -> None:
        """Close the ledger if this session opened it."""
        if self._owns_ledger:
            self.ledger.close()
