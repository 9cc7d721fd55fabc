"""Tracing and logging hooks of the ledger.

Spans are optional: with ``Settings.tracing`` off (the default) the ledger uses the
``NullTracer`` and nothing of OpenTelemetry is imported. With it on, the OpenTelemetry
adapter (``contextledger.infrastructure.tracing``, the ``otel`` extra) is resolved by
topic. Span attributes are ids, positions, versions and token counts, never message
content. Log records go to the standard ``logging`` loggers under ``contextledger.*``.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Protocol
from uuid import UUID

from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult

__all__ = ["TRACER_TOPIC", "NullTracer", "Span", "TracedSummarizer", "Tracer", "log", "traced"]

TRACER_TOPIC = "contextledger.infrastructure.tracing:OpenTelemetryTracer"

#: The ledger's own logger (commands and queries at DEBUG).
log = logging.getLogger("contextledger.ledger")

Attribute = str | int | float | bool


class Span(Protocol):
    """An open span: attributes can be added until it ends."""

    def set(self, name: str, value: Attribute | UUID | None) -> None: ...


class Tracer(Protocol):
    """Opens spans named ``contextledger.<name>`` with the given attributes."""

    def span(
        self, name: str, **attributes: Attribute | UUID | None
    ) -> contextlib.AbstractContextManager[Span]: ...


class _NullSpan:
    def set(self, name: str, value: Attribute | UUID | None) -> None:
        return None


_NULL_SPAN = _NullSpan()


class _NullSpanContext:
    """The one context manager every span of ``NullTracer`` is (no generator per call:
    an append opens a span)."""

    def __enter__(self) -> Span:
        return _NULL_SPAN

    def __exit__(self, *exc: object) -> None:
        return None


_NULL_SPAN_CONTEXT = _NullSpanContext()


class NullTracer:
    """The tracer when tracing is off: spans cost a context manager and nothing else."""

    def span(
        self, name: str, **attributes: Attribute | UUID | None
    ) -> contextlib.AbstractContextManager[Span]:
        return _NULL_SPAN_CONTEXT


class TracedSummarizer:
    """A summarizer whose calls are ``contextledger.summarize`` spans."""

    def __init__(self, inner: Summarizer, tracer: Tracer) -> None:
        self.inner = inner
        self.tracer = tracer
        self.model: str = inner.model

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        with self.tracer.span(
            "summarize",
            conversation_id=request.conversation_id,
            from_position=request.from_position,
            through_position=request.through_position,
            messages=len(request.messages),
        ) as span:
            result = self.inner.summarize(request)
            span.set("summary_tokens", result.output_tokens)
            span.set("input_tokens", result.input_tokens)
            return result


def traced(summarizer: Summarizer, tracer: Tracer) -> Summarizer:
    """``summarizer`` with its calls as spans of ``tracer`` (itself when tracing is off)."""
    if isinstance(tracer, NullTracer) or isinstance(summarizer, TracedSummarizer):
        return summarizer
    return TracedSummarizer(summarizer, tracer)
