"""The application layer: the Ledger, its ports, settings, typed results, the
summarization policy, and the followers of the log (read models among them).

    from contextledger.application import Ledger, ReductionPolicy
"""

from typing import TYPE_CHECKING

from contextledger._lazy import lazy_exports

if TYPE_CHECKING:
    from contextledger.application.addressing import KEY_NAMESPACE, ConversationRef
    from contextledger.application.async_ledger import AsyncLedger
    from contextledger.application.erasure import ErasureReport
    from contextledger.application.follower import FollowerHealth, LogFollower
    from contextledger.application.ledger import Ledger
    from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
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
    from contextledger.application.results import (
        AuditEvent,
        SummaryInfo,
        TokenTotals,
        TranscriptEntry,
        VerifyProblem,
        VerifyReport,
        WorkingMemory,
    )
    from contextledger.application.settings import Settings
    from contextledger.application.summarization import SummarizationRunner
    from contextledger.domain.errors import (
        ConcurrencyError,
        ContextLedgerError,
        ConversationNotFoundError,
        InvalidMessageError,
        MessageTooLargeError,
    )
    from contextledger.domain.messages import Message
    from contextledger.domain.policy import ReductionPolicy

#: Each name loads on first use, from the module that defines it.
_LAZY = {
    "KEY_NAMESPACE": "contextledger.application.addressing",
    "ConversationRef": "contextledger.application.addressing",
    "AsyncLedger": "contextledger.application.async_ledger",
    "ErasureReport": "contextledger.application.erasure",
    "FollowerHealth": "contextledger.application.follower",
    "LogFollower": "contextledger.application.follower",
    "Ledger": "contextledger.application.ledger",
    "Summarizer": "contextledger.application.ports",
    "SummaryRequest": "contextledger.application.ports",
    "SummaryResult": "contextledger.application.ports",
    "TokenCounter": "contextledger.application.ports",
    "ConversationRecord": "contextledger.application.projections",
    "ConversationsView": "contextledger.application.projections",
    "ReadModelProjection": "contextledger.application.projections",
    "ReadModelRunner": "contextledger.application.projections",
    "ReadModelView": "contextledger.application.projections",
    "SummariesView": "contextledger.application.projections",
    "TokenTotalsRecord": "contextledger.application.projections",
    "TokenTotalsView": "contextledger.application.projections",
    "TranscriptView": "contextledger.application.projections",
    "AuditEvent": "contextledger.application.results",
    "SummaryInfo": "contextledger.application.results",
    "TokenTotals": "contextledger.application.results",
    "TranscriptEntry": "contextledger.application.results",
    "VerifyProblem": "contextledger.application.results",
    "VerifyReport": "contextledger.application.results",
    "WorkingMemory": "contextledger.application.results",
    "Settings": "contextledger.application.settings",
    "SummarizationRunner": "contextledger.application.summarization",
    "ConcurrencyError": "contextledger.domain.errors",
    "ContextLedgerError": "contextledger.domain.errors",
    "ConversationNotFoundError": "contextledger.domain.errors",
    "InvalidMessageError": "contextledger.domain.errors",
    "MessageTooLargeError": "contextledger.domain.errors",
    "Message": "contextledger.domain.messages",
    "ReductionPolicy": "contextledger.domain.policy",
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
