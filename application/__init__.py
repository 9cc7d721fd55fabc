"""The application layer: the Ledger, its ports, settings, typed results, the
summarization policy, and the followers of the log (read models among them).

    from contextledger.application import Ledger, ReductionPolicy
"""

from contextledger.application.addressing import KEY_NAMESPACE, ConversationRef
from contextledger.application.async_ledger import AsyncLedger
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
