"""The application layer: the Ledger, its ports, settings, typed results, the
summarization policy, and the followers of the log (read models among them).

    from contextledger.application import Ledger, ReductionPolicy

Its modules live in rooms, one sub-package per concept, in this order from the top
(a room imports only rooms after it; tests/unit/test_structure.py checks):
facade, writing, reading, privacy, auditing, summaries, projections, formats,
following, storage, shared.
"""

from typing import TYPE_CHECKING

from contextledger._lazy import lazy_exports

if TYPE_CHECKING:
    from contextledger.application.facade.async_ledger import AsyncLedger
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.following.follower import FollowerHealth, LogFollower
    from contextledger.application.privacy.erasure import ErasureReport
    from contextledger.application.projections import (
        ConversationRecord,
        ConversationsView,
        ReadModelProjection,
        ReadModelRunner,
        ReadModelView,
        SummariesView,
        TokenTotalsRecord,
        TokenTotalsView,
        TranscriptView,
    )
    from contextledger.application.shared.addressing import KEY_NAMESPACE, ConversationRef
    from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
    from contextledger.application.shared.results import (
        AuditEvent,
        SummaryInfo,
        TokenTotals,
        TranscriptEntry,
        VerifyProblem,
        VerifyReport,
        WorkingMemory,
    )
    from contextledger.application.shared.settings import Settings
    from contextledger.application.summaries.summarization import SummarizationRunner
    from contextledger.domain.values.errors import (
        ConcurrencyError,
        ContextLedgerError,
        ConversationNotFoundError,
        InvalidMessageError,
        MessageTooLargeError,
    )
    from contextledger.domain.values.messages import Message
    from contextledger.domain.values.policy import ReductionPolicy

#: Each name loads on first use, from the module that defines it.
_LAZY = {
    "KEY_NAMESPACE": "contextledger.application.shared.addressing",
    "ConversationRef": "contextledger.application.shared.addressing",
    "AsyncLedger": "contextledger.application.facade.async_ledger",
    "ErasureReport": "contextledger.application.privacy.erasure",
    "FollowerHealth": "contextledger.application.following.follower",
    "LogFollower": "contextledger.application.following.follower",
    "Ledger": "contextledger.application.facade.ledger",
    "Summarizer": "contextledger.application.shared.ports",
    "SummaryRequest": "contextledger.application.shared.ports",
    "SummaryResult": "contextledger.application.shared.ports",
    "TokenCounter": "contextledger.application.shared.ports",
    "ConversationRecord": "contextledger.application.projections",
    "ConversationsView": "contextledger.application.projections",
    "ReadModelProjection": "contextledger.application.projections",
    "ReadModelRunner": "contextledger.application.projections",
    "ReadModelView": "contextledger.application.projections",
    "SummariesView": "contextledger.application.projections",
    "TokenTotalsRecord": "contextledger.application.projections",
    "TokenTotalsView": "contextledger.application.projections",
    "TranscriptView": "contextledger.application.projections",
    "AuditEvent": "contextledger.application.shared.results",
    "SummaryInfo": "contextledger.application.shared.results",
    "TokenTotals": "contextledger.application.shared.results",
    "TranscriptEntry": "contextledger.application.shared.results",
    "VerifyProblem": "contextledger.application.shared.results",
    "VerifyReport": "contextledger.application.shared.results",
    "WorkingMemory": "contextledger.application.shared.results",
    "Settings": "contextledger.application.shared.settings",
    "SummarizationRunner": "contextledger.application.summaries.summarization",
    "ConcurrencyError": "contextledger.domain.values.errors",
    "ContextLedgerError": "contextledger.domain.values.errors",
    "ConversationNotFoundError": "contextledger.domain.values.errors",
    "InvalidMessageError": "contextledger.domain.values.errors",
    "MessageTooLargeError": "contextledger.domain.values.errors",
    "Message": "contextledger.domain.values.messages",
    "ReductionPolicy": "contextledger.domain.values.policy",
}


__all__ = [
    "KEY_NAMESPACE",
    "AsyncLedger",
    "AuditEvent",
    "ConcurrencyError",
    "ContextLedgerError",
    "ConversationNotFoundError",
    "ConversationRecord",
    "ConversationRef",
    "ConversationsView",
    "ErasureReport",
    "FollowerHealth",
    "InvalidMessageError",
    "Ledger",
    "LogFollower",
    "Message",
    "MessageTooLargeError",
    "ReadModelProjection",
    "ReadModelRunner",
    "ReadModelView",
    "ReductionPolicy",
    "Settings",
    "SummariesView",
    "SummarizationRunner",
    "Summarizer",
    "SummaryInfo",
    "SummaryRequest",
    "SummaryResult",
    "TokenCounter",
    "TokenTotals",
    "TokenTotalsRecord",
    "TokenTotalsView",
    "TranscriptEntry",
    "TranscriptView",
    "VerifyProblem",
    "VerifyReport",
    "WorkingMemory",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
