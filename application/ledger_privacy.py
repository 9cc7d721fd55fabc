"""The ledger's data-subject calls: which subject a conversation belongs to, erasure
(crypto-shredding, ``application/erasure.py``) and the idle conversations retention
erases (``application/retention.py``). ``Ledger`` inherits them, as it inherits the
edits of ``ledger_edits``; each delegates in a line.
"""

from __future__ import annotations

from datetime import datetime
from typing import cast
from uuid import UUID

from contextledger.application.addressing import ConversationRef
from contextledger.application.erasure import ErasureReport, Erasures
from contextledger.application.retention import RetentionHost, idle_conversations

__all__ = ["LedgerPrivacy"]


class LedgerPrivacy:
    """Subjects, erasure and retention, as methods of the ledger."""

    erasures: Erasures

    def erase(
        self,
        *,
        subject: str | None = None,
        conversation: ConversationRef | None = None,
        reason: str,
    ) -> ErasureReport:
        """Erase a data subject's conversations by destroying the subject's key
        (crypto-shredding; ``application/erasure.py``): exactly one of ``subject`` and
        ``conversation`` (a conversation that is its own subject, or its subject's only
        one). Needs a cipher key. Afterwards their reads raise
        ``ConversationErasedError`` (a fork of another subject that inherited their
        history reads as what is its own, ``domain/remainder.py``); erasing again
        returns the report with ``already_erased=True``."""
        return self.erasures.erase(subject, conversation, reason)

    def subject_of(self, conversation_id: ConversationRef) -> str:
        """The data subject the conversation's content belongs to (its own id, as text,
        unless it names another)."""
        return self.erasures.subject_of(conversation_id)

    def idle_conversations(self, days: float, *, now: datetime | None = None) -> list[UUID]:
        """The conversations whose last event is older than ``days`` days before ``now``
        (default: the ledger's clock), in the order they were started; erased ones are
        left out. Read from the log (each conversation's newest event), never from a
        read model; what retention (``Settings.retention_idle_days``) erases."""
        return idle_conversations(cast("RetentionHost", self), days, now)
