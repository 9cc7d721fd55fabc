"""One attempt at a pending range: call the summarizer, record what came of it.

Whatever a summarizer raises is a failed attempt: a ``SummarizerError`` as it says
(retryable or not, with a provider's ``Retry-After``), any other exception (a bug in a
custom summarizer, a parser's ``KeyError``) as a retryable failure of the kind of its
class, and an answer that is not a ``SummaryResult`` with text as a
``SummarizerOutputError``. Each is recorded as ``SummarizationFailed``, so the attempts count up, backoff
grows with them and the offline fallback takes over when the settings say so.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult
from contextledger.application.shared.settings import Settings
from contextledger.domain.conversation import SummaryFailure
from contextledger.domain.values.errors import (
    ConcurrencyError,
    StaleSummaryError,
    StoreError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummaryQualityError,
)
from contextledger.domain.values.redaction import error_outline, provider_text

__all__ = ["Outcome", "SummaryRecorder", "attempt_summary"]

log = logging.getLogger("contextledger.summarization")


@dataclass(frozen=True)
class Outcome:
    """What a job decided: ``retry_in`` seconds (None: done)."""

    retry_in: float | None = None
    recheck: bool = False
    #: Why the attempt cannot succeed on a retry (a non-retryable error), else None.
    refused: str | None = None


class SummaryRecorder(Protocol):
    """What an attempt needs of the ledger: its settings and the two records."""

    @property
    def settings(self) -> Settings: ...

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None: ...

    def record_summary_failure(self, request: SummaryRequest, failure: SummaryFailure) -> int: ...


def attempt_summary(
    ledger: SummaryRecorder,
    summarizer: Summarizer,
    request: SummaryRequest,
    backoff: Callable[[int], float],
) -> Outcome:
    """Ask ``summarizer`` for ``request``'s range once and record the result or the failure."""
    try:
        result = summarizer.summarize(request)
    except SummarizerError as exc:
        return _failed(ledger, request, exc, backoff)
    except Exception as exc:  # a bug in the summarizer: a failed attempt like any other
        log.error(
            "summarizer %r raised %s at %s positions %d-%d",
            summarizer,
            type(exc).__name__,
            request.conversation_id,
            request.from_position,
            request.through_position,
            exc_info=exc,
        )
        crashed = SummarizerError(
            f"the summarizer raised {type(exc).__name__}: {provider_text(str(exc))}",
            model=getattr(summarizer, "model", None),
        )
        return _failed(ledger, request, crashed, backoff, kind=type(exc).__name__)
    wrong = _not_a_result(result)
    if wrong is not None:
        model = getattr(summarizer, "model", None)
        error = SummarizerOutputError(f"the summarizer answered {wrong}", model=model)
        return _failed(ledger, request, error, backoff)
    try:
        _record_answer(ledger, request, result)
    except StaleSummaryError:
        return Outcome(recheck=True)  # someone else recorded it, or the range moved on
    except SummaryQualityError as exc:
        failure = SummaryFailure(
            kind="quality",
            error=exc.message,
            retryable=True,
            called_provider=True,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
        )
        try:
            attempt = ledger.record_summary_failure(request, failure)
        except StaleSummaryError:
            return Outcome(recheck=True)
        return Outcome(retry_in=backoff(attempt))
    return Outcome(recheck=True)


def _record_answer(ledger: SummaryRecorder, request: SummaryRequest, result: SummaryResult) -> None:
    """Record an answer the provider was paid for. A store that is busy or away for a
    moment (a ``StoreError`` naming its cause, a ``ConcurrencyError``) is tried again
    for up to ``write_deadline`` seconds before the job fails: a failed job asks the
    summarizer again, and pays again, for an answer already given."""
    deadline = time.monotonic() + ledger.settings.write_deadline
    pause = 0.05
    while True:
        try:
            ledger.record_summary(request, result)
            return
        except (StoreError, ConcurrencyError) as exc:
            transient = isinstance(exc, ConcurrencyError) or (
                type(exc) is StoreError and exc.cause is not None
            )
            if not transient or time.monotonic() + pause >= deadline:
                raise
            log.warning("saving the summary of %s failed (%s); trying again", request.conversation_id, exc)
            time.sleep(pause)
            pause = min(pause * 2, 1.0)


def _not_a_result(result: object) -> str | None:
    """What is wrong with an answer that is not a ``SummaryResult`` with text (None: nothing)."""
    if not isinstance(result, SummaryResult):
        return f"{type(result).__name__} instead of a SummaryResult"
    if not isinstance(result.text, str):
        return f"a SummaryResult whose text is {type(result.text).__name__}"
    return None


def _failed(
    ledger: SummaryRecorder,
    request: SummaryRequest,
    exc: SummarizerError,
    backoff: Callable[[int], float],
    *,
    kind: str | None = None,
) -> Outcome:
    retryable = getattr(exc, "retryable", True) is not False
    failure = SummaryFailure(
        kind=kind or type(exc).__name__, error=exc.message, retryable=retryable, called_provider=True
    )
    try:
        attempt = ledger.record_summary_failure(request, failure)
    except StaleSummaryError:
        return Outcome(recheck=True)
    settings = ledger.settings
    delay = backoff(attempt)
    if isinstance(exc, SummarizerRateLimitedError):
        retry_after = getattr(exc, "retry_after", None)
        if isinstance(retry_after, int | float) and retry_after > 0:
            # A provider's Retry-After is honoured up to retry_max_seconds.
            delay = max(delay, min(float(retry_after), settings.retry_max_seconds))
    if not retryable:
        delay = max(delay, settings.retry_max_seconds)
    # The class and status only: the provider's words may quote the conversation; they
    # are in the SummarizationFailed record (contextledger replay shows them).
    outline = error_outline(exc) if kind is None else kind
    log.log(
        logging.WARNING if retryable else logging.ERROR,
        "summarization of %s positions %d-%d failed (attempt %d, %s, retry in %.2fs): %s",
        request.conversation_id,
        request.from_position,
        request.through_position,
        attempt,
        "retryable" if retryable else "not retryable",
        delay,
        outline,
    )
    return Outcome(retry_in=delay, refused=None if retryable else outline)
