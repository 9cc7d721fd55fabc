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
``max_retries`` asks for it. The errors are made by ``summarizer_base.ModelSummarizer``;
the API key is never part of an error message, a log line or a repr.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from contextledger.application.shared.ports import SummaryRequest, SummaryResult
from contextledger.domain.values.errors import ConfigurationError, SummarizerError, SummarizerOutputError
from contextledger.infrastructure.loopback import is_loopback
from contextledger.infrastructure.summarizers.summarizer_base import (
    ModelSummarizer,
    retry_after_seconds,
    summary_result,
)
from contextledger.infrastructure.summarizers.summary_prompt import summary_prompt

__all__ = ["GeminiSummarizer"]

_SECONDS = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


class GeminiSummarizer(ModelSummarizer):
    """Summarizes through Gemini's ``generateContent`` (``base_url``: another endpoint,
    such as a local test server)."""

    provider = "Gemini"
    key_variable = "GEMINI_API_KEY"

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
        super().__init__(model=model, api_key=api_key, base_url=base_url, timeout=timeout)
        if max_retries < 0:
            raise ConfigurationError("max_retries must not be negative")
        try:
            from google import genai
            from google.genai import types
        except ImportError as exc:
            raise ConfigurationError(
                "the Gemini summarizer needs google-genai: pip install 'contextledger[gemini]'"
            ) from exc
        self.temperature = temperature
        retry = types.HttpRetryOptions(attempts=max_retries + 1) if max_retries else None
        # A server on this machine is reached directly, whatever the proxy settings.
        direct = {"trust_env": False} if base_url and is_loopback(urlsplit(base_url).hostname) else None
        options = types.HttpOptions(
            base_url=base_url,
            timeout=int(timeout * 1000),
            retry_options=retry,
            client_args=direct,
            async_client_args=direct,
        )
        self._client = genai.Client(api_key=api_key, http_options=options)

    def prompt_for(self, request: SummaryRequest) -> tuple[str, str]:
        """The system instruction and the user turn: the previous summary plus only the
        newly covered messages (what ``OpenAISummarizer.messages_for`` sends)."""
        return summary_prompt(request)

    def _send(self, request: SummaryRequest, model: str) -> Any:
        system, user = self.prompt_for(request)
        config = {
            "system_instruction": system,
            "max_output_tokens": request.max_summary_tokens,
            "temperature": self.temperature,
        }
        return self._client.models.generate_content(
            model=model,
            contents=[{"role": "user", "parts": [{"text": user}]}],
            config=config,  # type: ignore[arg-type]
        )

    def _mapped(self, exc: Exception, model: str) -> SummarizerError | None:
        """The contextledger error for an exception the SDK call raised."""
        from google.genai import errors

        # The transport's exceptions by class name: google-genai 1.x and 2.x send through
        # httpx, 3.x through its fork httpx2 (same classes, another module).
        names = {cls.__name__ for cls in type(exc).__mro__}
        if "TimeoutException" in names or isinstance(exc, TimeoutError):
            return self.timed_out(model)
        if "TransportError" in names or isinstance(exc, ConnectionError):
            return self.unreachable(model, exc)
        if isinstance(exc, errors.APIError):
            code = int(exc.code or 0)
            if code == 429:
                return self.rate_limited(model, _retry_after(exc), status=code)
            reason = self.redacted(str(exc.message or exc.status or ""))
            return self.refused(model, code, reason or type(exc).__name__)
        if isinstance(exc, ValueError):  # JSON decoding of a malformed body, pydantic validation
            return self.malformed(model, type(exc).__name__)
        return None

    def _result(self, response: Any, model: str, latency_ms: float) -> SummaryResult:
        candidates = getattr(response, "candidates", None)
        if not candidates:
            raise SummarizerOutputError("the answer has no candidates", model=model)
        candidate = candidates[0]
        content = getattr(candidate, "content", None)
        parts = getattr(content, "parts", None) or []
        text = "".join(p.text for p in parts if getattr(p, "text", None) and not getattr(p, "thought", None))
        finish = str(getattr(candidate, "finish_reason", "") or "")
        usage = getattr(response, "usage_metadata", None)
        return summary_result(
            text.strip(),
            model,
            latency_ms,
            answered_by=getattr(response, "model_version", None),
            input_tokens=getattr(usage, "prompt_token_count", None),
            output_tokens=getattr(usage, "candidates_token_count", None),
            cut_off=finish.endswith("MAX_TOKENS"),
            empty=f"the summary is empty (finish_reason {finish or None})",
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
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    return retry_after_seconds(headers.get("retry-after"))
