"""The pure domain: the Conversation aggregate, messages, the reduction policy, errors.

Nothing here does I/O; token counts and summaries arrive as values.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from contextledger.domain.client_ids import ClientMessageId
    from contextledger.domain.conversation import Conversation, ConversationSnapshot
    from contextledger.domain.erasure import ErasedEvent
    from contextledger.domain.errors import (
        ConcurrencyError,
        ConfigurationError,
        ContextLedgerError,
        ContextLedgerRuntimeError,
        ContextOverflowError,
        ConversationErasedError,
        ConversationNotFoundError,
        DuplicateConversationError,
        IdempotencyConflictError,
        InvalidArgumentError,
        InvalidEditError,
        InvalidMessageError,
        InvalidPolicyError,
        KeyMissingError,
        LedgerClosedError,
        LogDamagedError,
        MessageTooLargeError,
        ReadOnlyError,
        RetractedPositionError,
        SchemaMissingError,
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
    from contextledger.domain.events import ConversationEvent, DomainEvent, SealedEvent, SummaryProvenance
    from contextledger.domain.messages import FunctionCall, Message, ToolCall
    from contextledger.domain.placement import Placement
    from contextledger.domain.policy import ReductionPolicy
    from contextledger.domain.state import ConversationState, PendingRange

#: Each name loads on first use, from the module that defines it.
_LAZY = {
    "ClientMessageId": "contextledger.domain.client_ids",
    "Conversation": "contextledger.domain.conversation",
    "ConversationSnapshot": "contextledger.domain.conversation",
    "ConcurrencyError": "contextledger.domain.errors",
    "ConfigurationError": "contextledger.domain.errors",
    "ContextLedgerError": "contextledger.domain.errors",
    "ContextLedgerRuntimeError": "contextledger.domain.errors",
    "ContextOverflowError": "contextledger.domain.errors",
    "ConversationErasedError": "contextledger.domain.errors",
    "ConversationNotFoundError": "contextledger.domain.errors",
    "ErasedEvent": "contextledger.domain.erasure",
    "KeyMissingError": "contextledger.domain.errors",
    "DuplicateConversationError": "contextledger.domain.errors",
    "IdempotencyConflictError": "contextledger.domain.errors",
    "InvalidArgumentError": "contextledger.domain.errors",
    "InvalidEditError": "contextledger.domain.errors",
    "InvalidMessageError": "contextledger.domain.errors",
    "InvalidPolicyError": "contextledger.domain.errors",
    "LedgerClosedError": "contextledger.domain.errors",
    "LogDamagedError": "contextledger.domain.errors",
    "MessageTooLargeError": "contextledger.domain.errors",
    "ReadOnlyError": "contextledger.domain.errors",
    "SchemaMissingError": "contextledger.domain.errors",
    "RetractedPositionError": "contextledger.domain.errors",
    "StaleSummaryError": "contextledger.domain.errors",
    "StoreError": "contextledger.domain.errors",
    "SummarizerAuthenticationError": "contextledger.domain.errors",
    "SummarizerError": "contextledger.domain.errors",
    "SummarizerOutputError": "contextledger.domain.errors",
    "SummarizerRateLimitedError": "contextledger.domain.errors",
    "SummarizerRequestError": "contextledger.domain.errors",
    "SummarizerTimeoutError": "contextledger.domain.errors",
    "SummarizerUnavailableError": "contextledger.domain.errors",
    "SummaryQualityError": "contextledger.domain.errors",
    "SummaryRejectedError": "contextledger.domain.errors",
    "SystemPromptEditError": "contextledger.domain.errors",
    "TrackingRewoundError": "contextledger.domain.errors",
    "UnknownPositionError": "contextledger.domain.errors",
    "UnknownReadModelError": "contextledger.domain.errors",
    "UsageError": "contextledger.domain.errors",
    "ConversationEvent": "contextledger.domain.events",
    "DomainEvent": "contextledger.domain.events",
    "SealedEvent": "contextledger.domain.events",
    "SummaryProvenance": "contextledger.domain.events",
    "FunctionCall": "contextledger.domain.messages",
    "Message": "contextledger.domain.messages",
    "ToolCall": "contextledger.domain.messages",
    "Placement": "contextledger.domain.placement",
    "ReductionPolicy": "contextledger.domain.policy",
    "ConversationState": "contextledger.domain.state",
    "PendingRange": "contextledger.domain.state",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextledger.domain' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "ClientMessageId",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextOverflowError",
    "Conversation",
    "ConversationErasedError",
    "ConversationEvent",
    "ConversationNotFoundError",
    "ConversationSnapshot",
    "ConversationState",
    "DomainEvent",
    "DuplicateConversationError",
    "ErasedEvent",
    "FunctionCall",
    "IdempotencyConflictError",
    "InvalidArgumentError",
    "InvalidEditError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "KeyMissingError",
    "LedgerClosedError",
    "LogDamagedError",
    "Message",
    "MessageTooLargeError",
    "PendingRange",
    "Placement",
    "ReadOnlyError",
    "ReductionPolicy",
    "RetractedPositionError",
    "SchemaMissingError",
    "SealedEvent",
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
