"""OpenTelemetry spans for the ledger (the ``otel`` extra: opentelemetry-api and -sdk).

Resolved by topic only when ``Settings.tracing`` is on, so the package never imports
OpenTelemetry otherwise. Spans use the globally configured tracer provider (or the one
given) under the instrumentation name ``contextledger``.

A span that ends in an exception has the status ERROR and an ``exception`` event that
name the exception's class and HTTP status only (``redaction.error_outline``): its
text, and the traceback of the SDK error under it, may quote the conversation.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from contextledger.domain.values.errors import ConfigurationError
from contextledger.domain.values.redaction import error_outline

__all__ = ["OpenTelemetryTracer"]

try:
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode
except ImportError as exc:  # pragma: no cover - depends on the installed extras
    raise ConfigurationError(
        "tracing is on but OpenTelemetry is not installed: pip install 'contextledger[otel]'",
        setting="tracing",
    ) from exc


def _value(value: Any) -> Any:
    return str(value) if isinstance(value, UUID) else value


class _Span:
    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, name: str, value: Any) -> None:
        if value is not None:
            self._span.set_attribute(f"contextledger.{name}", _value(value))


class OpenTelemetryTracer:
    """The ``Tracer`` port on OpenTelemetry: spans named ``contextledger.<operation>``."""

    def __init__(self, tracer_provider: Any = None) -> None:
        self._tracer = trace.get_tracer("contextledger", tracer_provider=tracer_provider)

    @contextlib.contextmanager
    def span(self, name: str, **attributes: Any) -> Iterator[_Span]:
        with self._tracer.start_as_current_span(
            f"contextledger.{name}", record_exception=False, set_status_on_exception=False
        ) as span:
            wrapped = _Span(span)
            for key, value in attributes.items():
                wrapped.set(key, value)
            try:
                yield wrapped
            except BaseException as exc:
                outline = error_outline(exc)
                span.add_event(
                    "exception", {"exception.type": type(exc).__name__, "exception.message": outline}
                )
                span.set_status(Status(StatusCode.ERROR, outline))
                raise
