"""The pure domain: the Conversation aggregate, messages, the reduction policy, errors.

Nothing here does I/O; token counts and summaries arrive as values.

Its modules live in rooms and in a few loose modules, in this order from the top (each
imports only what comes after it; tests/unit/test_structure.py checks): remainder,
conversation, commands, folding, events, values. The loose modules are the ones stored
logs name by path, which stay where they were (``conversation`` with the aggregate and
its snapshot; ``events``, with ``client_ids``, ``placement`` and ``erasure`` beside it),
and ``remainder``, which reads a fork's log through the aggregate; ``moved`` keeps the
old paths of the moved modules resolving as topics.
"""

from typing import TYPE_CHECKING

from contextledger._lazy import lazy_exports

if TYPE_CHECKING:
    from contextledger.domain.client_ids import ClientMessageId
    from contextledger.domain.conversation import Conversation, ConversationSnapshot
    from contextledger.domain.erasure import ErasedEvent
    from contextledger.domain.events import ConversationEvent, DomainEvent, SealedEvent, SummaryProvenance
    from contextledger.domain.folding.state import ConversationState, PendingRange
    from contextledger.domain.placement import Placement
    from contextledger.domain.values.errors import (
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
        InvalidArgumentTypeError,
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
    from contextledger.domain.values.messages import FunctionCall, Message, ToolCall
    from contextledger.domain.values.policy import ReductionPolicy

#: Each name loads on first use, from the module that defines it.
_LAZY = {
    "ClientMessageId": "contextledger.domain.client_ids",
    "Conversation": "contextledger.domain.conversation",
    "ConversationSnapshot": "contextledger.domain.conversation",
    "ConcurrencyError": "contextledger.domain.values.errors",
    "ConfigurationError": "contextledger.domain.values.errors",
    "ContextLedgerError": "contextledger.domain.values.errors",
    "ContextLedgerRuntimeError": "contextledger.domain.values.errors",
    "ContextOverflowError": "contextledger.domain.values.errors",
    "ConversationErasedError": "contextledger.domain.values.errors",
    "ConversationNotFoundError": "contextledger.domain.values.errors",
    "ErasedEvent": "contextledger.domain.erasure",
    "KeyMissingError": "contextledger.domain.values.errors",
    "DuplicateConversationError": "contextledger.domain.values.errors",
    "IdempotencyConflictError": "contextledger.domain.values.errors",
    "InvalidArgumentError": "contextledger.domain.values.errors",
    "InvalidArgumentTypeError": "contextledger.domain.values.errors",
    "InvalidEditError": "contextledger.domain.values.errors",
    "InvalidMessageError": "contextledger.domain.values.errors",
    "InvalidPolicyError": "contextledger.domain.values.errors",
    "LedgerClosedError": "contextledger.domain.values.errors",
    "LogDamagedError": "contextledger.domain.values.errors",
    "MessageTooLargeError": "contextledger.domain.values.errors",
    "ReadOnlyError": "contextledger.domain.values.errors",
    "SchemaMissingError": "contextledger.domain.values.errors",
    "RetractedPositionError": "contextledger.domain.values.errors",
    "StaleSummaryError": "contextledger.domain.values.errors",
    "StoreError": "contextledger.domain.values.errors",
    "SummarizerAuthenticationError": "contextledger.domain.values.errors",
    "SummarizerError": "contextledger.domain.values.errors",
    "SummarizerOutputError": "contextledger.domain.values.errors",
    "SummarizerRateLimitedError": "contextledger.domain.values.errors",
    "SummarizerRequestError": "contextledger.domain.values.errors",
    "SummarizerTimeoutError": "contextledger.domain.values.errors",
    "SummarizerUnavailableError": "contextledger.domain.values.errors",
    "SummaryQualityError": "contextledger.domain.values.errors",
    "SummaryRejectedError": "contextledger.domain.values.errors",
    "SystemPromptEditError": "contextledger.domain.values.errors",
    "TrackingRewoundError": "contextledger.domain.values.errors",
    "UnknownPositionError": "contextledger.domain.values.errors",
    "UnknownReadModelError": "contextledger.domain.values.errors",
    "UsageError": "contextledger.domain.values.errors",
    "ConversationEvent": "contextledger.domain.events",
    "DomainEvent": "contextledger.domain.events",
    "SealedEvent": "contextledger.domain.events",
    "SummaryProvenance": "contextledger.domain.events",
    "FunctionCall": "contextledger.domain.values.messages",
    "Message": "contextledger.domain.values.messages",
    "ToolCall": "contextledger.domain.values.messages",
    "Placement": "contextledger.domain.placement",
    "ReductionPolicy": "contextledger.domain.values.policy",
    "ConversationState": "contextledger.domain.folding.state",
    "PendingRange": "contextledger.domain.folding.state",
}


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
    "InvalidArgumentTypeError",
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

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
