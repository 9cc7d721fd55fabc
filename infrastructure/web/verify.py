"""The viewer's integrity pages: what ``verify`` found, for one conversation or the
whole store, as plain JSON-ready dictionaries.

A damaged log (a missing, out-of-order or undecodable event) is shown here with
every problem and where it is, never as a server error: these pages read through
``verify``, which reports damage instead of raising it.
"""

from __future__ import annotations

from typing import Any
from uuid import UUID

from contextledger.application.facade.ledger import Ledger
from contextledger.application.shared.results import VerifyReport

__all__ = ["verify_page"]


def verify_page(ledger: Ledger, cid: UUID | None = None, *, damage: str | None = None) -> dict[str, Any]:
    """What ``verify`` says of one conversation (``cid``) or of the whole store.
    ``damage``: why the conversation's own page could not be shown (its log is
    damaged), shown above the problems."""
    report: VerifyReport = ledger.verify(cid)
    conversations: dict[str, list[dict[str, Any]]] = {}
    for p in report.problems:
        conversations.setdefault(str(p.conversation_id), []).append(
            {"version": p.version, "problem": p.problem}
        )
    return {
        "conversation_id": None if cid is None else str(cid),
        "damage": damage,
        "verified": report.ok,
        "conversations": report.conversations,
        "events": report.events,
        "messages": report.messages,
        "summaries": report.summaries,
        "erased": [str(c) for c in report.erased],
        "problems": [
            {"conversation_id": str(p.conversation_id), "version": p.version, "problem": p.problem}
            for p in report.problems
        ],
        "by_conversation": [
            {"conversation_id": key, "problems": found} for key, found in conversations.items()
        ],
    }
