"""The one error tree of contextledger.

::

    ContextLedgerError
    ├── UsageError                      the caller asked for something invalid
    │   ├── InvalidMessageError         malformed message or broken tool-call order
    │   ├── InvalidPolicyError          a ReductionPolicy that cannot work
    │   ├── ContextOverflowError        a message that cannot fit under max_context_tokens
    │   ├── ConversationNotFoundError   no conversation with that id (or at that version)
    │   ├── ConfigurationError          bad URL, bad setting, missing tiktoken encoding
    │   ├── DuplicateConversationError  start() with an id that already exists
    │   └── UnknownReadModelError       rebuild() of a read model that does not exist
    └── ContextLedgerRuntimeError       the environment failed, not the caller
        ├── ConcurrencyError            optimistic-concurrency retries exhausted
        ├── StoreError                  the event store failed (I/O, undecodable event)
        ├── TrackingRewoundError        a read model was rebuilt under a running follower
        ├── SummaryRejectedError        a summary result that cannot be applied
        │   ├── StaleSummaryError       its range is no longer the pending one
        │   └── SummaryQualityError     empty, error text, too long, over the cap
        └── SummarizerError             a summarizer call failed (retryable unless said)
            ├── SummarizerTimeoutError
            ├── SummarizerRateLimitedError  (retry_after seconds, if the provider said)
            ├── SummarizerUnavailableError  (5xx, refused or dropped connection)
            └── SummarizerOutputError       (empty, malformed or over-long output)

Every error carries context attributes (``conversation_id``, ``version``, ...) as
keyword arguments, kept on the instance and shown in ``str()``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextOverflowError",
    "ConversationNotFoundError",
    "DuplicateConversationError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "StaleSummaryError",
    "StoreError",
    "SummarizerError",
    "SummarizerOutputError",
    "SummarizerRateLimitedError",
    "SummarizerTimeoutError",
    "SummarizerUnavailableError",
    "SummaryQualityError",
    "SummaryRejectedError",
    "TrackingRewoundError",
    "UnknownReadModelError",
    "UsageError",
]


class ContextLedgerError(Exception):
    """Root of every error raised by contextledger."""

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context: dict[str, Any] = context
        for key, value in context.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        if not self.context:
            return self.message
        details = ", ".join(f"{k}={v!r}" for k, v in self.context.items())
        return f"{self.message} ({details})"


class UsageError(ContextLedgerError):
    """The caller asked for something invalid; retrying the same call cannot help."""


class InvalidMessageError(UsageError):
    """A message is malformed, or breaks OpenAI's tool-call ordering rules."""


class InvalidPolicyError(UsageError):
    """A ReductionPolicy whose settings contradict each other or cannot be met."""


class ContextOverflowError(UsageError):
    """A message (with the system prompt) cannot fit under ``max_context_tokens``."""


class ConversationNotFoundError(UsageError):
    """No conversation exists with that id (or not at that version)."""


class DuplicateConversationError(UsageError):
    """``start()`` was given an id that is already taken."""


class ConfigurationError(UsageError):
    """A URL, a setting or an installed resource (e.g. a tiktoken encoding) is wrong."""


class UnknownReadModelError(UsageError):
    """``rebuild()`` was given a name no projection has."""


class ContextLedgerRuntimeError(ContextLedgerError):
    """The environment failed; the same call may succeed later."""


class ConcurrencyError(ContextLedgerRuntimeError):
    """Concurrent writers kept conflicting; the bounded retries ran out."""


class StoreError(ContextLedgerRuntimeError):
    """The event store failed, or a stored event could not be decoded."""


class TrackingRewoundError(ContextLedgerRuntimeError):
    """A view's tracking row went back below what this process had seen (someone
    rebuilt the read model); the follower resumes from there."""


class SummaryRejectedError(ContextLedgerRuntimeError):
    """A summary result was not applied; the log is unchanged apart from the rejection."""


class StaleSummaryError(SummaryRejectedError):
    """The summary's range is not the conversation's pending range (late or duplicate)."""


class SummaryQualityError(SummaryRejectedError):
    """The summary failed the quality gate (empty, error text, too long, over the cap)."""


class SummarizerError(ContextLedgerRuntimeError):
    """A summarizer call failed. ``retryable`` says whether trying again may help."""

    retryable: bool = True


class SummarizerTimeoutError(SummarizerError):
    """The summarizer did not answer in time."""


class SummarizerRateLimitedError(SummarizerError):
    """The provider answered 429; ``retry_after`` holds its hint in seconds, if any."""


class SummarizerUnavailableError(SummarizerError):
    """The provider answered 5xx, refused the connection or dropped it."""


class SummarizerOutputError(SummarizerError):
    """The provider answered, but the output is empty, malformed or too long."""
