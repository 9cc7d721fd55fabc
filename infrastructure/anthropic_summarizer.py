"""The Anthropic summarizer: the Messages API through the ``anthropic`` SDK.

It sends the same prompt as the OpenAI summarizer (``summary_prompt``: the
instruction as ``system``, the previous summary and the new messages as one user
turn) and maps every SDK exception here, at the adapter boundary:

| SDK / outcome                                        | contextledger error              |
|------------------------------------------------------|----------------------------------|
| ``APITimeoutError``                                  | ``SummarizerTimeoutError``       |
| ``RateLimitError`` (429)                             | ``SummarizerRateLimitedError`` (``retry_after``) |
| ``APIConnectionError``, status >= 500 (529 overloaded) | ``SummarizerUnavailableError`` |
| 401, 403                                             | ``SummarizerAuthenticationError`` |
| other ``APIStatusError`` (400, 404, 413)             | ``SummarizerRequestError``       |
| malformed JSON, no text, ``max_tokens``, refusal     | ``SummarizerOutputError``        |

``temperature`` is sent only when given (the model's default otherwise). Retries with
backoff are the summarization policy's job: the SDK's are off unless asked for. The
SDK is imported when a summarizer is made, never by ``import contextledger``; the API
key is never part of an error message, a log line or a repr.
Needs the ``anthropic`` extra.
"""

from __future__ import annotations

import time
from importlib import import_module
from typing import Any

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
from contextledger.infrastructure.summary_prompt import PROMPT_VERSION, summary_prompt

__all__ = ["AnthropicSummarizer"]


def _sdk() -> Any:
    try:
        return import_module("anthropic")
    except ImportError as exc:
        raise ConfigurationError(
            "the Anthropic summarizer needs the anthropic SDK: pip install 'contextledger[anthropic]'"
        ) from exc


class AnthropicSummarizer(Summarizer):
    """Summarizes through Anthropic's Messages API (or a compatible server at ``base_url``)."""

    def __init__(
        self,
        *,
        model: str = "claude-haiku-4-5",
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        temperature: float | None = None,
    ) -> None:
        if not api_key:
            raise ConfigurationError("the Anthropic summarizer needs an API key (ANTHROPIC_API_KEY)")
        if timeout <= 0:
            raise ConfigurationError("timeout must be positive")
        self._sdk = _sdk()
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self.temperature = temperature
        self._api_key = api_key
        self._client = self._sdk.Anthropic(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    def __repr__(self) -> str:
        return f"AnthropicSummarizer(model={self.model!r}, base_url={self.base_url!r}, api_key=***)"

    def request_for(self, request: SummaryRequest) -> dict[str, Any]:
        """The ``messages.create`` arguments (without ``model``) for ``request``."""
        system, user = summary_prompt(request)
        arguments: dict[str, Any] = {
            "system": system,
            "messages": [{"role": "user", "content": user}],
            "max_tokens": request.max_summary_tokens,
        }
        if self.temperature is not None:  # a body field: not every SDK release names it
            arguments["extra_body"] = {"temperature": self.temperature}
        return arguments

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        model = request.model or self.model
        sdk = self._sdk
        started = time.perf_counter()
        try:
            response = self._client.messages.create(
                model=model,
                extra_headers={"Idempotency-Key": request.idempotency_key},
                **self.request_for(request),
            )
        except sdk.APITimeoutError as exc:
            raise SummarizerTimeoutError(
                f"the summarizer did not answer within {self.timeout:g} s", model=model
            ) from exc
        except sdk.RateLimitError as exc:
            raise SummarizerRateLimitedError(
                "the provider is rate limiting (429)",
                model=model,
                retry_after=_retry_after(exc.response.headers.get("retry-after")),
            ) from exc
        except sdk.APIConnectionError as exc:
            raise SummarizerUnavailableError(
                f"cannot reach the summarizer: {type(exc.__cause__ or exc).__name__}", model=model
            ) from exc
        except sdk.APIStatusError as exc:
            status = exc.status_code
            if status >= 500:
                reason = "overloaded" if status == 529 else f"answered {status}"
                raise SummarizerUnavailableError(
                    f"the provider {reason} ({status})", model=model, status=status
                ) from exc
            if status in (401, 403):
                raise SummarizerAuthenticationError(
                    f"the provider refused the API key or its permissions ({status}): "
                    "check ANTHROPIC_API_KEY and the model's access",
                    model=model,
                    status=status,
                ) from exc
            raise SummarizerRequestError(
                f"the provider rejected the request ({status}): {_error_text(exc, self._api_key)}",
                model=model,
                status=status,
            ) from exc
        except sdk.APIResponseValidationError as exc:
            raise SummarizerOutputError("the provider's answer is not a message", model=model) from exc
        except ValueError as exc:  # JSON decoding of a malformed body
            raise SummarizerOutputError(f"malformed answer from the provider: {exc}", model=model) from exc
        latency_ms = (time.perf_counter() - started) * 1000
        return _result(response, model, latency_ms)


def _result(response: Any, model: str, latency_ms: float) -> SummaryResult:
    blocks = getattr(response, "content", None)
    if not isinstance(blocks, list):
        raise SummarizerOutputError("the answer has no content", model=model)
    stop = getattr(response, "stop_reason", None)
    if stop == "refusal":
        raise SummarizerOutputError("the model refused to summarize", model=model)
    if stop == "max_tokens":
        raise SummarizerOutputError("the summary was cut off at max_summary_tokens", model=model)
    text = "".join(str(getattr(b, "text", "")) for b in blocks if getattr(b, "type", None) == "text").strip()
    if not text:
        raise SummarizerOutputError("the summary is empty", model=model)
    usage = getattr(response, "usage", None)
    prompt = None
    if usage is not None and isinstance(getattr(usage, "input_tokens", None), int):
        prompt = usage.input_tokens + sum(
            getattr(usage, key, None) or 0
            for key in ("cache_creation_input_tokens", "cache_read_input_tokens")
        )
    return SummaryResult(
        text=text,
        model=getattr(response, "model", None) or model,
        prompt_version=PROMPT_VERSION,
        input_tokens=prompt,
        output_tokens=getattr(usage, "output_tokens", None),
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


def _error_text(exc: Any, api_key: str) -> str:
    """The provider's one-line reason, if its error body gives one: never the key,
    control characters escaped (``redaction.provider_text``)."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error")
        message = body.get("message") or (error.get("message") if isinstance(error, dict) else None)
        if isinstance(message, str) and message:
            return provider_text(message.replace(api_key, "***"), limit=300)
    return type(exc).__name__
