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
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

from contextledger.application.addressing import KEY_NAMESPACE, ConversationRef
from contextledger.application.async_ledger import AsyncLedger
from contextledger.application.follower import FollowerHealth, LogFollower
from contextledger.application.ledger import Ledger
from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.projections import ReadModelProjection, ReadModelRunner
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
from contextledger.application.whatif_results import (
    ConversationWhatIf,
    ModelPrice,
    RunFigures,
    SummarizerUsage,
    WhatIfReport,
)
from contextledger.application.wire import ContextMessage, ToolDefinition
from contextledger.domain.conversation import Conversation
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
from contextledger.domain.messages import FunctionCall, Message, ToolCall
from contextledger.domain.policy import ReductionPolicy
from contextledger.infrastructure import database as _database  # noqa: F401  (see below)
from contextledger.infrastructure.offline_summarizer import OfflineSummarizer
from contextledger.infrastructure.tokens import TiktokenCounter

if TYPE_CHECKING:
    from contextledger.infrastructure.openai_summarizer import OpenAISummarizer
    from contextledger.infrastructure.readmodels import SQLReadModels, attach_read_models

# Every ledger opens its store through ``infrastructure.database`` (its URL parsing is
# SQLAlchemy's), so it loads with the package, not inside the first ``Ledger.open()``.
#: Names whose modules load on first use: the openai SDK and SQLAlchemy are large (an
#: import of contextledger took 0.6 s and left 113,000 objects for every full garbage
#: collection to walk); a process that never uses them never loads them.
_LAZY = {
    "OpenAISummarizer": "contextledger.infrastructure.openai_summarizer",
    "SQLReadModels": "contextledger.infrastructure.readmodels",
    "attach_read_models": "contextledger.infrastructure.readmodels",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'contextledger' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})


def main(argv: Sequence[str] | None = None) -> int:
    """The ``contextledger`` command line, run in this process; returns the exit status."""
    from contextledger.infrastructure.cli import main as cli_main

    return cli_main(argv)


try:
    __version__ = _version("contextledger")
except PackageNotFoundError:  # pragma: no cover - running from a source tree
    __version__ = "0.0.0"

__all__ = [
    "KEY_NAMESPACE",
    "AsyncLedger",
    "AuditEvent",
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextMessage",
    "ContextOverflowError",
    "Conversation",
    "ConversationNotFoundError",
    "ConversationRef",
    "ConversationWhatIf",
    "DuplicateConversationError",
    "FollowerHealth",
    "FunctionCall",
    "InvalidArgumentError",
    "InvalidEditError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "Ledger",
    "LogFollower",
    "Message",
    "MessageTooLargeError",
    "ModelPrice",
    "OfflineSummarizer",
    "OpenAISummarizer",
    "ReadModelProjection",
    "ReadModelRunner",
    "ReductionPolicy",
    "RetractedPositionError",
    "RunFigures",
    "SQLReadModels",
    "Settings",
    "StaleSummaryError",
    "StoreError",
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
