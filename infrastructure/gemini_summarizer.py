"""The Gemini summarizer: Google's Gemini API through the ``google-genai`` SDK (the
``gemini`` extra: ``pip install contextledger[gemini]``), imported when a
``GeminiSummarizer`` is made, never when this module loads.

It asks what ``OpenAISummarizer`` asks (the same system prompt and transcript, the
same ``PROMPT_VERSION``), the system prompt as the ``system_instruction``. Every SDK
exception is mapped here, at the adapter boundary:

| SDK / outcome                                        | contextledger error              |
|------------------------------------------------------|----------------------------------|
| ``TimeoutException`` (httpx, httpx2)                 | ``SummarizerTimeoutError``       |
| ``ClientError`` 429 (``RESOURCE_EXHAUSTED``)         | ``SummarizerRateLimitedError`` (1) |
| ``ServerError`` (5xx), connection refused or dropped | ``SummarizerUnavailableError``   |
| ``ClientError`` 401, 403                             | ``SummarizerAuthenticationError`` |
| other ``ClientError`` (400, 404 ...)                 | ``SummarizerRequestError``       |
| malformed JSON, no candidate, empty text, cut off    | ``SummarizerOutputError``        |

(1) ``retry_after`` from Google's ``RetryInfo.retryDelay``, else ``Retry-After``.

Retries with backoff are the summarization policy's job: the SDK retries only when
``max_retries`` asks for it. The API key is never part of an error message, a log
line or a repr.
"""

from __future__ import annotations

import re
import time
from typing import Any

from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult
from contextledger.domain.errors import (
    ConfigurationError,
    SummarizerAuthenticationError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerRequestError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
)
from contextledger.domain.redaction import provider_text
from contextledger.infrastructure.openai_summarizer import PROMPT_VERSION, SYSTEM_PROMPT, render_transcript

__all__ = ["GeminiSummarizer"]

_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


class GeminiSummarizer(Summarizer):
    """Summarizes through Gemini's ``generateContent`` (``base_url``: another endpoint,
    such as a local test server)."""

    def __init__(
        self,
        *,
        model: str = "gemini-2.5-flash",
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        temperature: float = 0.0,
    ) -> None:
        if not api_key:
            raise ConfigurationError("the Gemini summarizer needs an API key (GEMINI_API_KEY)")
        if timeout <= 0:
            raise ConfigurationError("timeout must be positive")
        if max_retries < 0:
            raise ConfigurationError("max_retries must not be negative")
        try:
            from google import genai
            from google.genai import types
        except ImportError as exc:
            raise ConfigurationError(
                "the Gemini summarizer needs google-genai: pip install 'contextledger[gemini]'"
            ) from exc
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.temperature = temperature
        self._api_key = api_key
        retry = types.HttpRetryOptions(attempts=max_retries + 1) if max_retries else None
        options = types.HttpOptions(base_url=base_url, timeout=int(timeout * 1000), retry_options=retry)
        self._client = genai.Client(api_key=api_key, http_options=options)

    def __repr__(self) -> str:
        return f"GeminiSummarizer(model={self.model!r}, base_url={self.base_url!r}, api_key=***)"

    def prompt_for(self, request: SummaryRequest) -> tuple[str, str]:
        """The system instruction and the user turn: the previous summary plus only the
        newly covered messages (what ``OpenAISummarizer.messages_for`` sends)."""
        positions = tuple(position for position, _ in request.positioned())
        user = (
            f"Current summary:\n{request.previous_summary or '(none)'}\n\n"
            f"New messages ({request.from_position}-{request.through_position}):\n"
            f"{render_transcript(request.messages, request.from_position, positions=positions)}"
        )
        return SYSTEM_PROMPT.format(max_tokens=request.max_summary_tokens), user

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        model = request.model or self.model
        system, user = self.prompt_for(request)
        config = {
            "system_instruction": system,
            "max_output_tokens": request.max_summary_tokens,
            "temperature": self.temperature,
        }
        started = time.perf_counter()
        try:
            response = self._client.models.generate_content(
                model=model,
                contents=[{"role": "user", "parts": [{"text": user}]}],
                config=config,  # type: ignore[arg-type]
            )
        except Exception as exc:  # every failure the SDK reports is mapped, or raised as is
            mapped = self._mapped(exc, model)
            if mapped is None:
                raise
            raise mapped from exc
        return _result(response, model, (time.perf_counter() - started) * 1000)

    def _mapped(self, exc: Exception, model: str) -> SummarizerError | None:
        """The contextledger error for an exception the SDK call raised."""
        from google.genai import errors

        # The transport's exceptions by class name: google-genai 1.x and 2.x send through
        # httpx, 3.x through its fork httpx2 (same classes, another module).
        names = {cls.__name__ for cls in type(exc).__mro__}
        if "TimeoutException" in names or isinstance(exc, TimeoutError):
            return SummarizerTimeoutError(
                f"the summarizer did not answer within {self.timeout:g} s", model=model
            )
        if "TransportError" in names or isinstance(exc, ConnectionError):
            return SummarizerUnavailableError(
                f"cannot reach the summarizer: {type(exc).__name__}", model=model
            )
        if isinstance(exc, errors.APIError):
            code = int(exc.code or 0)
            if code == 429:
                return SummarizerRateLimitedError(
                    "the provider is rate limiting (429)",
                    model=model,
                    status=code,
                    retry_after=_retry_after(exc),
                )
            if code >= 500:
                return SummarizerUnavailableError(f"the provider answered {code}", model=model, status=code)
            if code in (401, 403):
                return SummarizerAuthenticationError(
                    f"the provider refused the API key or its permissions ({code}): "
                    "check GEMINI_API_KEY and the model's access",
                    model=model,
                    status=code,
                )
            reason = provider_text(
                str(exc.message or exc.status or "").replace(self._api_key, "***"), limit=300
            )
            return SummarizerRequestError(
                f"the provider rejected the request ({code}): {reason or type(exc).__name__}",
                model=model,
                status=code,
            )
        if isinstance(exc, ValueError):  # JSON decoding of a malformed body, pydantic validation
            return SummarizerOutputError(
                f"malformed answer from the provider: {type(exc).__name__}", model=model
            )
        return None


def _result(response: Any, model: str, latency_ms: float) -> SummaryResult:
    candidates = getattr(response, "candidates", None)
    if not candidates:
        raise SummarizerOutputError("the answer has no candidates", model=model)
    candidate = candidates[0]
    content = getattr(candidate, "content", None)
    parts = getattr(content, "parts", None) or []
    text = "".join(
        p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", None)
    ).strip()
    finish = str(getattr(candidate, "finish_reason", "") or "")
    if finish.endswith("MAX_TOKENS"):
        raise SummarizerOutputError("the summary was cut off at max_summary_tokens", model=model)
    if not text:
        raise SummarizerOutputError(f"the summary is empty (finish_reason {finish or None})", model=model)
    usage = getattr(response, "usage_metadata", None)
    return SummaryResult(
        text=text,
        model=getattr(response, "model_version", None) or model,
        prompt_version=PROMPT_VERSION,
        input_tokens=getattr(usage, "prompt_token_count", None),
        output_tokens=getattr(usage, "candidates_token_count", None),
        latency_ms=latency_ms,
    )


def _retry_after(exc: Any) -> float | None:
    """Seconds to wait: Google's ``RetryInfo.retryDelay`` ("1.5s"), else ``Retry-After``."""
    body = getattr(exc, "details", None)
    details: dict[str, Any] = body if isinstance(body, dict) else {}
    inner = details.get("error")
    error: dict[str, Any] = inner if isinstance(inner, dict) else details
    for detail in error.get("details") or []:
        delay = detail.get("retryDelay") if isinstance(detail, dict) else None
        match = _SECONDS.match(delay) if isinstance(delay, str) else None
        if match:
            return float(match.group(1))
    response = getattr(exc, "response", None)
    value = getattr(response, "headers", {}).get("retry-after") if response is not None else None
    try:
        seconds = float(value) if value else None
    except (TypeError, ValueError):
        return None
    return seconds if seconds is not None and seconds >= 0 else None
