"""The pure domain: the Conversation aggregate, messages, the reduction policy, errors.

Nothing here does I/O; token counts and summaries arrive as values.
"""

from contextledger.domain.client_ids import ClientMessageId
from contextledger.domain.conversation import Conversation, ConversationSnapshot
from contextledger.domain.errors import (
    ConcurrencyError,
    ConfigurationError,
    ContextLedgerError,
    ContextLedgerRuntimeError,
    ContextOverflowError,
    ConversationNotFoundError,
    DuplicateConversationError,
    InvalidArgumentError,
    InvalidEditError,
    InvalidMessageError,
    InvalidPolicyError,
    MessageTooLargeError,
    RetractedPositionError,
    StaleSummaryError,
    StoreError,
    SummarizerAuthenticationError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerRequestError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
    SummaryQualityError,
    SummaryRejectedError,
    SystemPromptEditError,
    TrackingRewoundError,
    UnknownPositionError,
    UnknownReadModelError,
    UsageError,
)
from contextledger.domain.events import ConversationEvent, DomainEvent, SummaryProvenance
from contextledger.domain.messages import FunctionCall, Message, ToolCall
from contextledger.domain.placement import Placement
from contextledger.domain.policy import ReductionPolicy
from contextledger.domain.state import ConversationState, PendingRange

__all__ = [
    "ClientMessageId",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextOverflowError",
    "Conversation",
    "ConversationEvent",
    "ConversationNotFoundError",
    "ConversationSnapshot",
    "ConversationState",
    "DomainEvent",
    "DuplicateConversationError",
    "FunctionCall",
    "InvalidArgumentError",
    "InvalidEditError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "Message",
    "MessageTooLargeError",
    "PendingRange",
    "Placement",
    "ReductionPolicy",
    "RetractedPositionError",
    "StaleSummaryError",
    "StoreError",
    "SummarizerAuthenticationError",
    "SummarizerError",
    "SummarizerOutputError",
    "SummarizerRateLimitedError",
    "SummarizerRequestError",
    "SummarizerTimeoutError",
    "SummarizerUnavailableError",
    "SummaryProvenance",
    "SummaryQualityError",
    "SummaryRejectedError",
    "SystemPromptEditError",
    "ToolCall",
    "TrackingRewoundError",
    "UnknownPositionError",
    "UnknownReadModelError",
    "UsageError",
]
