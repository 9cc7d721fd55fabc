"""What the model-backed summarizers share; each keeps only its SDK call, the reading
of its provider's answer and its provider's error mapping.

``ModelSummarizer.summarize`` times the call, hands every exception the SDK raises to
the subclass's ``_mapped`` (an exception it does not map is raised as is) and its
answer to ``_result``. The errors are made here, so that every provider's failures
read alike:

| failure                               | contextledger error                              |
|---------------------------------------|--------------------------------------------------|
| no answer within ``timeout``          | ``SummarizerTimeoutError``                       |
| 429                                   | ``SummarizerRateLimitedError`` (``retry_after``) |
| connection refused or dropped, 5xx    | ``SummarizerUnavailableError``                   |
| 401, 403                              | ``SummarizerAuthenticationError``                |
| any other status                      | ``SummarizerRequestError``                       |
| malformed, empty or cut-off answer    | ``SummarizerOutputError``                        |

``sdk_error`` maps the exceptions of the openai and anthropic SDKs, which share their
classes' names and meanings. Retries with backoff are the summarization policy's job,
not a summarizer's. The API key is never part of an error message or a repr.
"""

from __future__ import annotations

import time
from typing import Any, ClassVar

from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult
from contextledger.domain.values.errors import (
    ConfigurationError,
    SummarizerAuthenticationError,
    SummarizerError,
    SummarizerOutputError,
    SummarizerRateLimitedError,
    SummarizerRequestError,
    SummarizerTimeoutError,
    SummarizerUnavailableError,
)
from contextledger.domain.values.redaction import provider_text
from contextledger.infrastructure.summarizers.summary_prompt import PROMPT_VERSION

__all__ = ["ModelSummarizer", "retry_after_seconds", "summary_result"]


class ModelSummarizer(Summarizer):
    """A summarizer that asks a provider's model through its SDK."""

    #: The provider's name in messages, and the variable its API key is read from.
    provider: ClassVar[str]
    key_variable: ClassVar[str]

    def __init__(self, *, model: str, api_key: str | None, base_url: str | None, timeout: float) -> None:
        if not api_key:
            raise ConfigurationError(f"the {self.provider} summarizer needs an API key ({self.key_variable})")
        if timeout <= 0:
            raise ConfigurationError("timeout must be positive")
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self._api_key = api_key

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, api_key=***)"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        model = request.model or self.model
        started = time.perf_counter()
        try:
            response = self._send(request, model)
        except Exception as exc:  # every failure the SDK reports is mapped, or raised as is
            mapped = self._mapped(exc, model)
            if mapped is None:
                raise
            raise mapped from exc
        return self._result(response, model, (time.perf_counter() - started) * 1000)

    def _send(self, request: SummaryRequest, model: str) -> Any:
        """The SDK call: the provider's answer to ``request``."""
        raise NotImplementedError

    def _mapped(self, exc: Exception, model: str) -> SummarizerError | None:
        """The contextledger error for an exception the SDK call raised (None: not one
        of the SDK's)."""
        raise NotImplementedError

    def _result(self, response: Any, model: str, latency_ms: float) -> SummaryResult:
        """The summary in the provider's answer (``summary_result``)."""
        raise NotImplementedError

    # ------------------------------------------------------------ the errors

    def timed_out(self, model: str) -> SummarizerTimeoutError:
        return SummarizerTimeoutError(f"the summarizer did not answer within {self.timeout:g} s", model=model)

    def unreachable(self, model: str, cause: BaseException) -> SummarizerUnavailableError:
        return SummarizerUnavailableError(f"cannot reach the summarizer: {type(cause).__name__}", model=model)

    def rate_limited(
        self, model: str, retry_after: float | None, status: int | None = None
    ) -> SummarizerRateLimitedError:
        return SummarizerRateLimitedError(
            "the provider is rate limiting (429)", model=model, status=status, retry_after=retry_after
        )

    def refused(self, model: str, status: int, reason: str) -> SummarizerError:
        """The error for an answer with HTTP ``status`` (not 429): 5xx, a refused key,
        or a rejected request (``reason``: the provider's, key-free)."""
        if status >= 500:
            return SummarizerUnavailableError(self.server_error(status), model=model, status=status)
        if status in (401, 403):
            return SummarizerAuthenticationError(
                f"the provider refused the API key or its permissions ({status}): "
                f"check {self.key_variable} and the model's access",
                model=model,
                status=status,
            )
        return SummarizerRequestError(
            f"the provider rejected the request ({status}): {reason}", model=model, status=status
        )

    def server_error(self, status: int) -> str:
        """What a 5xx answer is called."""
        return f"the provider answered {status}"

    def malformed(self, model: str, detail: object) -> SummarizerOutputError:
        return SummarizerOutputError(f"malformed answer from the provider: {detail}", model=model)

    def redacted(self, message: str) -> str:
        """The provider's ``message`` on one line: never the key, control characters
        escaped (``redaction.provider_text``)."""
        return provider_text(message.replace(self._api_key, "***"), limit=300)

    def sdk_error(self, sdk: Any, exc: Exception, model: str, answer: str) -> SummarizerError | None:
        """The error for an exception of the openai or anthropic SDK (``sdk``: the
        module), whose answers are ``answer`` ("a chat completion")."""
        if isinstance(exc, sdk.APITimeoutError):
            return self.timed_out(model)
        if isinstance(exc, sdk.RateLimitError):
            return self.rate_limited(model, retry_after_seconds(exc.response.headers.get("retry-after")))
        if isinstance(exc, sdk.APIConnectionError):
            return self.unreachable(model, exc.__cause__ or exc)
        if isinstance(exc, sdk.APIStatusError):
            return self.refused(model, exc.status_code, self._body_reason(exc))
        if isinstance(exc, sdk.APIResponseValidationError):
            return SummarizerOutputError(f"the provider's answer is not {answer}", model=model)
        if isinstance(exc, ValueError):  # JSON decoding of a malformed body
            return self.malformed(model, exc)
        return None

    def _body_reason(self, exc: Any) -> str:
        """The one-line reason an SDK status error's body gives, else its class name."""
        body = exc.body
        if isinstance(body, dict):
            error = body.get("error")
            message = body.get("message") or (error.get("message") if isinstance(error, dict) else None)
            if isinstance(message, str) and message:
                return self.redacted(message)
        return type(exc).__name__


def summary_result(
    text: str,
    model: str,
    latency_ms: float,
    *,
    answered_by: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    cut_off: bool,
    empty: str = "the summary is empty",
) -> SummaryResult:
    """The result for a summary ``text`` (stripped) that ``answered_by`` (else
    ``model``) wrote; a summary cut off at the token limit, or an empty one, is a
    ``SummarizerOutputError`` (``empty``: its message)."""
    if cut_off:
        raise SummarizerOutputError("the summary was cut off at max_summary_tokens", model=model)
    if not text:
        raise SummarizerOutputError(empty, model=model)
    return SummaryResult(
        text=text,
        model=answered_by or model,
        prompt_version=PROMPT_VERSION,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        latency_ms=latency_ms,
    )


def retry_after_seconds(value: str | None) -> float | None:
    """A ``Retry-After`` header's seconds (None: absent, a date, or negative)."""
    if not value:
        return None
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        return None
    return seconds if seconds >= 0 else None
