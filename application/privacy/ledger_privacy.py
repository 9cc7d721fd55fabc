"""The ledger's data-subject calls: which subject a conversation belongs to, erasure
(crypto-shredding, ``application/privacy/erasure.py``) and the idle conversations retention
erases (``application/privacy/retention.py``). ``Ledger`` inherits them, as it inherits the
edits of ``ledger_edits``; each delegates in a line.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, cast
from uuid import UUID

from contextledger.application.privacy.erasure import ErasureReport, Erasures
from contextledger.application.privacy.receipts import ErasureReceipt, ReceiptCheck
from contextledger.application.privacy.retention import RetentionHost, idle_conversations
from contextledger.application.privacy.subject_export import SubjectExport, export_subject
from contextledger.application.shared.addressing import ConversationRef
from contextledger.application.storage.store import store_errors
from contextledger.domain.values.errors import InvalidArgumentError

__all__ = ["LedgerPrivacy"]


class LedgerPrivacy:
    """Subjects, erasure and retention, as methods of the ledger."""

    erasures: Erasures
    clock: Callable[[], datetime]

    def erase(
        self,
        subject_or_conversation: str | UUID | None = None,
        reason: str | None = None,
        *,
        subject: str | None = None,
        conversation: ConversationRef | None = None,
        force: bool = False,
    ) -> ErasureReport:
        """Erase a data subject's conversations by destroying the subject's key
        (crypto-shredding; ``application/privacy/erasure.py``): exactly one of ``subject`` and
        ``conversation`` (a conversation that is its own subject, or its subject's only
        one), or ``erase(subject_or_conversation, reason)`` (a string names a subject
        when a store knows it, else a conversation's id or key). Works with or without a
        master key (``key_scope="subject"``, the default). The report's ``receipt`` says
        what was destroyed (``check_receipt`` checks it later). Afterwards their reads
        raise ``ConversationErasedError`` (a fork of another subject that inherited
        their history reads as what is its own,
        ``domain/remainder.py``); erasing again returns the report with
        ``already_erased=True``. The master key is checked against each store's key
        table first (``ConfigurationError``, nothing changed); a subject no
        conversation names and never erased is refused (``InvalidArgumentError``)
        unless ``force`` (to pre-empt a subject: no conversation can be started under
        it afterwards)."""
        if subject_or_conversation is not None:
            if subject is not None or conversation is not None:
                raise InvalidArgumentError(
                    "erase takes a subject or a conversation once: positionally or by keyword",
                    argument="subject_or_conversation",
                )
            subject, conversation = self.erasures.target(subject_or_conversation, force=force)
        return self.erasures.erase(subject, conversation, reason, force=force)

    def check_receipt(self, receipt: ErasureReceipt | dict[str, Any]) -> ReceiptCheck:
        """Check an erasure's receipt (``ErasureReport.receipt``, or its JSON form) against
        the store: the erasure is recorded (its record's digest is the receipt's), the
        subject's keys are tombstones, and nothing of its conversations is readable
        (``application/privacy/receipts.py``). A problem is listed, never raised."""
        if not isinstance(receipt, ErasureReceipt):
            receipt = ErasureReceipt.from_json(receipt)
        return self.erasures.check_receipt(receipt)

    def export_subject(self, subject: str) -> SubjectExport:
        """Everything the store holds about data subject ``subject``: each of its
        conversations (messages as appended, in the format they were handed in,
        summaries, edits with their times, token totals) and the forks of other subjects
        holding its content, as far as that content goes (``application/privacy/subject_export.py``;
        ``to_json()``, ``to_markdown()``). An erased subject is ``ConversationErasedError``."""
        with store_errors():
            return export_subject(self, self.erasures.stores(), subject, now=self.clock())

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
