"""The OpenAI summarizer: any OpenAI-compatible chat-completions endpoint, through the
``openai`` SDK.

Every SDK exception is mapped here, at the adapter boundary:

| SDK / outcome                                   | contextledger error              |
|-------------------------------------------------|----------------------------------|
| ``APITimeoutError``                             | ``SummarizerTimeoutError``       |
| ``RateLimitError`` (429)                        | ``SummarizerRateLimitedError`` (``retry_after``) |
| ``APIConnectionError``, status >= 500           | ``SummarizerUnavailableError``   |
| other ``APIStatusError`` (400, 401, 403, 404)   | ``SummarizerError``, ``retryable=False`` |
| malformed JSON, no choices, empty text, cut off | ``SummarizerOutputError``        |

The API key is never part of an error message, a log line or a repr.
"""

from __future__ import annotations

import time
from typing import Any

import openai

from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult
from contextledger.domain.errors import (
    ConfigurationError,
    SummarizerAuthenticationError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerRequestError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
)
from contextledger.domain.redaction import provider_text
from contextledger.infrastructure.summary_prompt import (
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    render_transcript,
    summary_prompt,
)

__all__ = ["PROMPT_VERSION", "SYSTEM_PROMPT", "OpenAISummarizer", "render_transcript"]


class OpenAISummarizer(Summarizer):
    """Summarizes through the chat-completions API of OpenAI or a compatible server."""

    def __init__(
        self,
        *,
        model: str = "gpt-4o-mini",
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        temperature: float = 0.0,
    ) -> None:
        if not api_key:
            raise ConfigurationError("the OpenAI summarizer needs an API key (OPENAI_API_KEY)")
        if timeout <= 0:
            raise ConfigurationError("timeout must be positive")
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.temperature = temperature
        # Retries with backoff are the summarization policy's job; the SDK's are off
        # unless asked for.
        self._client = openai.OpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    def __repr__(self) -> str:
        return f"OpenAISummarizer(model={self.model!r}, base_url={self.base_url!r}, api_key=***)"

    def messages_for(self, request: SummaryRequest) -> list[dict[str, str]]:
        """The prompt: the previous summary plus only the newly covered messages."""
        system, user = summary_prompt(request)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        model = request.model or self.model
        started = time.perf_counter()
        try:
            response = self._client.chat.completions.create(
                model=model,
                messages=self.messages_for(request),  # type: ignore[arg-type]
                max_tokens=request.max_summary_tokens,
                temperature=self.temperature,
                extra_headers={"Idempotency-Key": request.idempotency_key},
            )
        except openai.APITimeoutError as exc:
            raise SummarizerTimeoutError(
                f"the summarizer did not answer within {self.timeout:g} s", model=model
            ) from exc
        except openai.RateLimitError as exc:
            raise SummarizerRateLimitedError(
                "the provider is rate limiting (429)",
                model=model,
                retry_after=_retry_after(exc.response.headers.get("retry-after")),
            ) from exc
        except openai.APIConnectionError as exc:
            raise SummarizerUnavailableError(
                f"cannot reach the summarizer: {type(exc.__cause__ or exc).__name__}", model=model
            ) from exc
        except openai.APIStatusError as exc:
            if exc.status_code >= 500:
                raise SummarizerUnavailableError(
                    f"the provider answered {exc.status_code}", model=model, status=exc.status_code
                ) from exc
            if exc.status_code in (401, 403):
                raise SummarizerAuthenticationError(
                    f"the provider refused the API key or its permissions ({exc.status_code}): "
                    "check OPENAI_API_KEY and the model's access",
                    model=model,
                    status=exc.status_code,
                ) from exc
            reason = _error_text(exc, self._client.api_key)
            raise SummarizerRequestError(
                f"the provider rejected the request ({exc.status_code}): {reason}",
                model=model,
                status=exc.status_code,
            ) from exc
        except openai.APIResponseValidationError as exc:
            raise SummarizerOutputError(
                "the provider's answer is not a chat completion", model=model
            ) from exc
        except ValueError as exc:  # JSON decoding of a malformed body
            raise SummarizerOutputError(f"malformed answer from the provider: {exc}", model=model) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        return _result(response, model, latency_ms)


def _result(response: Any, model: str, latency_ms: float) -> SummaryResult:
    choices = getattr(response, "choices", None)
    if not choices:
        raise SummarizerOutputError("the answer has no choices", model=model)
    choice = choices[0]
    text = (getattr(choice.message, "content", None) or "").strip()
    if not text:
        raise SummarizerOutputError("the summary is empty", model=model)
    if choice.finish_reason == "length":
        raise SummarizerOutputError("the summary was cut off at max_summary_tokens", model=model)
    usage = getattr(response, "usage", None)
    return SummaryResult(
        text=text,
        model=getattr(response, "model", None) or model,
        prompt_version=PROMPT_VERSION,
        input_tokens=getattr(usage, "prompt_tokens", None),
        output_tokens=getattr(usage, "completion_tokens", None),
        latency_ms=latency_ms,
    )


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


def _error_text(exc: openai.APIStatusError, api_key: str) -> str:
    """The provider's one-line reason, if its error body gives one: never the key nor
    anything like one, control characters escaped (``redaction.provider_text``)."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        message = body.get("message") or (error.get("message") if isinstance(error, dict) else None)
        if isinstance(message, str) and message:
            return provider_text(message.replace(api_key, "***"), limit=300)
    return type(exc).__name__
