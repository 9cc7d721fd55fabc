"""contextledger: event-sourced conversation memory for backends that talk to LLMs.

Everything a user needs is here, in one flat namespace::

    import contextledger as cl

    with cl.Ledger.open("sqlite:///app.db") as ledger:
        cid = ledger.start("You are helpful.", policy=cl.ReductionPolicy(trigger_messages=40))
        ledger.append(cid, {"role": "user", "content": "hi"})
        messages = ledger.context(cid)

``AsyncLedger`` has the same methods as coroutines (``async with AsyncLedger.open(url)``).

The layers stay importable for those who go deeper (``contextledger.domain``,
``contextledger.application``, ``contextledger.infrastructure``); test doubles and
contract suites are in ``contextledger.testing``. Optional integrations live in
``contextledger.integrations`` and are never imported from here.
"""

from __future__ import annotations

from collections.abc import Sequence
from importlib import import_module
from typing import TYPE_CHECKING, Any

from contextledger._lazy import lazy_exports

if TYPE_CHECKING:
    from contextledger.application.auditing.whatif_results import (
        ConversationWhatIf,
        ModelPrice,
        RunFigures,
        SummarizerUsage,
        WhatIfReport,
    )
    from contextledger.application.facade.async_ledger import AsyncLedger
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.following.follower import (
        FollowerHealth,
        LogFollower,
    )
    from contextledger.application.privacy.erasure import ErasureReport
    from contextledger.application.privacy.receipts import ErasedRange, ErasureReceipt, ReceiptCheck
    from contextledger.application.privacy.subject_export import ExportedConversation, SubjectExport
    from contextledger.application.projections import (
        ReadModelProjection,
        ReadModelRunner,
    )
    from contextledger.application.shared.addressing import (
        KEY_NAMESPACE,
        ConversationRef,
    )
    from contextledger.application.shared.ports import (
        Summarizer,
        SummaryRequest,
        SummaryResult,
        TokenCounter,
    )
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
    from contextledger.application.shared.wire import (
        ContextMessage,
        ToolDefinition,
    )
    from contextledger.application.summaries.summarization import SummarizationRunner
    from contextledger.domain.conversation import Conversation
    from contextledger.domain.erasure import ErasedEvent
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
        ReadModelAheadError,
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
    from contextledger.domain.values.messages import (
        FunctionCall,
        Message,
        ToolCall,
    )
    from contextledger.domain.values.policy import ReductionPolicy
    from contextledger.infrastructure.counting.anthropic_counter import AnthropicCountingCounter
    from contextledger.infrastructure.counting.estimates import ClaudeCounter, GeminiCounter
    from contextledger.infrastructure.counting.tokens import TiktokenCounter
    from contextledger.infrastructure.keys.subject_keys import SubjectKeys
    from contextledger.infrastructure.readmodels import (
        SQLReadModels,
        attach_read_models,
    )
    from contextledger.infrastructure.summarizers.anthropic_summarizer import AnthropicSummarizer
    from contextledger.infrastructure.summarizers.compaction_summarizer import (
        AnthropicCompactionSummarizer,
        OpenAICompactionSummarizer,
    )
    from contextledger.infrastructure.summarizers.gemini_summarizer import GeminiSummarizer
    from contextledger.infrastructure.summarizers.offline_summarizer import OfflineSummarizer
    from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer

    __version__: str

#: Every name loads on first use, from the module that defines it: ``import
#: contextledger`` loads none of SQLAlchemy, eventsourcing, psycopg, tiktoken, the openai
#: SDK or the application layer (it took 0.6 s and left 113,000 objects for every full
#: garbage collection to walk), and a process loads only what it uses (the command
#: line's ``--version`` and ``--help`` nothing at all).
_MODULES: dict[str, tuple[str, ...]] = {
    "application.shared.addressing": ("KEY_NAMESPACE", "ConversationRef"),
    "application.facade.async_ledger": ("AsyncLedger",),
    "application.privacy.erasure": ("ErasureReport",),
    "application.privacy.receipts": ("ErasedRange", "ErasureReceipt", "ReceiptCheck"),
    "application.privacy.subject_export": ("ExportedConversation", "SubjectExport"),
    "application.following.follower": ("FollowerHealth", "LogFollower"),
    "application.facade.ledger": ("Ledger",),
    "application.shared.ports": ("Summarizer", "SummaryRequest", "SummaryResult", "TokenCounter"),
    "application.projections": ("ReadModelProjection", "ReadModelRunner"),
    "application.shared.results": (
        "AuditEvent",
        "SummaryInfo",
        "TokenTotals",
        "TranscriptEntry",
        "VerifyProblem",
        "VerifyReport",
        "WorkingMemory",
    ),
    "application.shared.settings": ("Settings",),
    "application.summaries.summarization": ("SummarizationRunner",),
    "application.auditing.whatif_results": (
        "ConversationWhatIf",
        "ModelPrice",
        "RunFigures",
        "SummarizerUsage",
        "WhatIfReport",
    ),
    "application.shared.wire": ("ContextMessage", "ToolDefinition"),
    "domain.conversation": ("Conversation",),
    "domain.erasure": ("ErasedEvent",),
    "domain.values.errors": (
        "ConcurrencyError",
        "ConfigurationError",
        "ContextLedgerError",
        "ContextLedgerRuntimeError",
        "ContextOverflowError",
        "ConversationErasedError",
        "ConversationNotFoundError",
        "DuplicateConversationError",
        "IdempotencyConflictError",
        "InvalidArgumentError",
        "InvalidArgumentTypeError",
        "InvalidEditError",
        "InvalidMessageError",
        "InvalidPolicyError",
        "KeyMissingError",
        "LedgerClosedError",
        "LogDamagedError",
        "MessageTooLargeError",
        "ReadModelAheadError",
        "ReadOnlyError",
        "RetractedPositionError",
        "SchemaMissingError",
        "StaleSummaryError",
        "StoreError",
        "SummarizerAuthenticationError",
        "SummarizerError",
        "SummarizerOutputError",
        "SummarizerRateLimitedError",
        "SummarizerRequestError",
        "SummarizerTimeoutError",
        "SummarizerUnavailableError",
        "SummaryQualityError",
        "SummaryRejectedError",
        "SystemPromptEditError",
        "TrackingRewoundError",
        "UnknownPositionError",
        "UnknownReadModelError",
        "UsageError",
    ),
    "domain.values.messages": ("FunctionCall", "Message", "ToolCall"),
    "domain.values.policy": ("ReductionPolicy",),
    "infrastructure.counting.anthropic_counter": ("AnthropicCountingCounter",),
    "infrastructure.summarizers.anthropic_summarizer": ("AnthropicSummarizer",),
    "infrastructure.summarizers.gemini_summarizer": ("GeminiSummarizer",),
    "infrastructure.summarizers.offline_summarizer": ("OfflineSummarizer",),
    "infrastructure.counting.tokens": ("TiktokenCounter",),
    "infrastructure.counting.estimates": ("ClaudeCounter", "GeminiCounter"),
    "infrastructure.keys.subject_keys": ("SubjectKeys",),
    "infrastructure.summarizers.compaction_summarizer": (
        "AnthropicCompactionSummarizer",
        "OpenAICompactionSummarizer",
    ),
    "infrastructure.summarizers.openai_summarizer": ("OpenAISummarizer",),
    "infrastructure.readmodels": ("SQLReadModels", "attach_read_models"),
}
_LAZY = {name: f"contextledger.{module}" for module, names in _MODULES.items() for name in names}
#: A ledger opens its store through ``infrastructure.persistence.database`` (its URL parsing is
#: SQLAlchemy's): it loads with the ledger class, not inside the first ``open()``.
_WITH = dict.fromkeys(("Ledger", "AsyncLedger"), "contextledger.infrastructure.persistence.database")


def __getattr__(name: str) -> Any:
    if name == "__version__":
        value = globals()["__version__"] = _package_version()
        return value
    value = _exported(name)
    if name in _WITH:
        import_module(_WITH[name])
    return value


def _package_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("contextledger")
    except PackageNotFoundError:  # pragma: no cover - running from a source tree
        return "0.0.0"


def main(argv: Sequence[str] | None = None) -> int:
    """The ``contextledger`` command line, run in this process; returns the exit status."""
    from contextledger.infrastructure.cli import main as cli_main

    return cli_main(argv)


__all__ = [
    "KEY_NAMESPACE",
    "AnthropicCompactionSummarizer",
    "AnthropicCountingCounter",
    "AnthropicSummarizer",
    "AsyncLedger",
    "AuditEvent",
    "ClaudeCounter",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextMessage",
    "ContextOverflowError",
    "Conversation",
    "ConversationErasedError",
    "ConversationNotFoundError",
    "ConversationRef",
    "ConversationWhatIf",
    "DuplicateConversationError",
    "ErasedEvent",
    "ErasedRange",
    "ErasureReceipt",
    "ErasureReport",
    "ExportedConversation",
    "FollowerHealth",
    "FunctionCall",
    "GeminiCounter",
    "GeminiSummarizer",
    "IdempotencyConflictError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidEditError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "KeyMissingError",
    "Ledger",
    "LedgerClosedError",
    "LogDamagedError",
    "LogFollower",
    "Message",
    "MessageTooLargeError",
    "ModelPrice",
    "OfflineSummarizer",
    "OpenAICompactionSummarizer",
    "OpenAISummarizer",
    "ReadModelAheadError",
    "ReadModelProjection",
    "ReadModelRunner",
    "ReadOnlyError",
    "ReceiptCheck",
    "ReductionPolicy",
    "RetractedPositionError",
    "RunFigures",
    "SQLReadModels",
    "SchemaMissingError",
    "Settings",
    "StaleSummaryError",
    "StoreError",
    "SubjectExport",
    "SubjectKeys",
    "SummarizationRunner",
    "Summarizer",
    "SummarizerAuthenticationError",
    "SummarizerError",
    "SummarizerOutputError",
    "SummarizerRateLimitedError",
    "SummarizerRequestError",
    "SummarizerTimeoutError",
    "SummarizerUnavailableError",
    "SummarizerUsage",
    "SummaryInfo",
    "SummaryQualityError",
    "SummaryRejectedError",
    "SummaryRequest",
    "SummaryResult",
    "SystemPromptEditError",
    "TiktokenCounter",
    "TokenCounter",
    "TokenTotals",
    "ToolCall",
    "ToolDefinition",
    "TrackingRewoundError",
    "TranscriptEntry",
    "UnknownPositionError",
    "UnknownReadModelError",
    "UsageError",
    "VerifyProblem",
    "VerifyReport",
    "WhatIfReport",
    "WorkingMemory",
    "__version__",
    "attach_read_models",
    "main",
]

_exported, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
