"""Session ids -> conversation ids, shared by the integrations.

A stand-in for the ledger's string keys (``Ledger.get_or_start(key, **start_args)``)
and edit commands (``pop``/``clear``): replace ``conversation_for_key`` with
``get_or_start`` and drop the generations once those exist. A key's conversation is
``uuid5(NAMESPACE, key)``; an edit moves the key to its next *generation*
(``uuid5(NAMESPACE, f"{key}\\0{n}")``), a fresh conversation, leaving the old one
untouched in the log.
"""

from __future__ import annotations

import contextlib
from typing import Any
from uuid import UUID, uuid5

from contextledger.application.ledger import Ledger
from contextledger.domain.errors import ConversationNotFoundError, DuplicateConversationError

__all__ = ["NAMESPACE", "conversation_for_key", "next_generation"]

NAMESPACE = UUID("4f6c2b1e-8a4d-5c3e-9f1a-2d7b6e0c9a51")


def _generation_id(key: str, generation: int) -> UUID:
    return uuid5(NAMESPACE, key if generation == 0 else f"{key}\0{generation}")


def _exists(ledger: Ledger, cid: UUID) -> bool:
    try:
        ledger.store.read(cid, lambda c: c.version)
    except ConversationNotFoundError:
        return False
    return True


def _start(ledger: Ledger, cid: UUID, start_args: dict[str, Any]) -> UUID:
    with contextlib.suppress(DuplicateConversationError):
        ledger.start(conversation_id=cid, **start_args)
    return cid


def _current_generation(ledger: Ledger, key: str) -> int:
    generation = 0
    while _exists(ledger, _generation_id(key, generation + 1)):
        generation += 1
    return generation


def conversation_for_key(ledger: Ledger, key: str, **start_args: Any) -> UUID:
    """The conversation ``key`` names now, started with ``start_args`` if it is new."""
    first = _start(ledger, _generation_id(key, 0), start_args)
    generation = _current_generation(ledger, key)
    return first if generation == 0 else _generation_id(key, generation)


def next_generation(ledger: Ledger, key: str, **start_args: Any) -> UUID:
    """Move ``key`` to a fresh, empty conversation; returns its id."""
    generation = _current_generation(ledger, key) + 1
    return _start(ledger, _generation_id(key, generation), start_args)
