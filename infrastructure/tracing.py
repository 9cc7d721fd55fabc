"""OpenTelemetry spans for the ledger (the ``otel`` extra: opentelemetry-api and -sdk).

Resolved by topic only when ``Settings.tracing`` is on, so the package never imports
OpenTelemetry otherwise. Spans use the globally configured tracer provider (or the one
given) under the instrumentation name ``contextledger``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any
from uuid import UUID

from contextledger.domain.errors import ConfigurationError

__all__ = ["OpenTelemetryTracer"]

try:
    from opentelemetry import trace
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
        with self._tracer.start_as_current_span(f"contextledger.{name}") as span:
            wrapped = _Span(span)
            for key, value in attributes.items():
                wrapped.set(key, value)
            yield wrapped
