"""The pure domain: the Conversation aggregate, messages, the reduction policy, errors.

Nothing here does I/O; token counts and summaries arrive as values.
"""

from contextledger.domain.client_ids import ClientMessageId
from contextledger.domain.conversation import (
    Conversation,
    ConversationSnapshot,
    ConversationState,
    PendingRange,
    SummaryProvenance,
)
from contextledger.domain.errors import (
    ConcurrencyError,
    ConfigurationError,
    ContextLedgerError,
    ContextLedgerRuntimeError,
    ContextOverflowError,
    ConversationNotFoundError,
    DuplicateConversationError,
    InvalidMessageError,
    InvalidPolicyError,
    StaleSummaryError,
    StoreError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
    SummaryQualityError,
    SummaryRejectedError,
    TrackingRewoundError,
    UnknownReadModelError,
    UsageError,
)
from contextledger.domain.events import DomainEvent
from contextledger.domain.messages import FunctionCall, Message, ToolCall
from contextledger.domain.policy import ReductionPolicy

__all__ = [
    "ClientMessageId",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextOverflowError",
    "Conversation",
    "ConversationNotFoundError",
    "ConversationSnapshot",
    "ConversationState",
    "DomainEvent",
    "DuplicateConversationError",
    "FunctionCall",
    "InvalidMessageError",
    "InvalidPolicyError",
    "Message",
    "PendingRange",
    "ReductionPolicy",
    "StaleSummaryError",
    "StoreError",
    "SummarizerError",
    "SummarizerOutputError",
    "SummarizerRateLimitedError",
    "SummarizerTimeoutError",
    "SummarizerUnavailableError",
    "SummaryProvenance",
    "SummaryQualityError",
    "SummaryRejectedError",
    "ToolCall",
    "TrackingRewoundError",
    "UnknownReadModelError",
    "UsageError",
]
