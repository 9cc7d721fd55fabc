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
SDK is imported when a summarizer is made, never by ``import contextledger``. The
errors are made by ``summarizer_base.ModelSummarizer``; the API key is never part of an
error message, a log line or a repr.
Needs the ``anthropic`` extra.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

from contextledger.application.shared.ports import SummaryRequest, SummaryResult
from contextledger.domain.values.errors import ConfigurationError, SummarizerError, SummarizerOutputError
from contextledger.infrastructure.loopback import direct_if_loopback
from contextledger.infrastructure.summarizers.summarizer_base import ModelSummarizer, summary_result
from contextledger.infrastructure.summarizers.summary_prompt import summary_prompt

__all__ = ["AnthropicSummarizer"]


def _sdk() -> Any:
    try:
        return import_module("anthropic")
    except ImportError as exc:
        raise ConfigurationError(
            "the Anthropic summarizer needs the anthropic SDK: pip install 'contextledger[anthropic]'"
        ) from exc


class AnthropicSummarizer(ModelSummarizer):
    """Summarizes through Anthropic's Messages API (or a compatible server at ``base_url``)."""

    provider = "Anthropic"
    key_variable = "ANTHROPIC_API_KEY"

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
        super().__init__(model=model, api_key=api_key, base_url=base_url, timeout=timeout)
        self._sdk = _sdk()
        self.temperature = temperature
        self._client = direct_if_loopback(
            self._sdk.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries),
            self._sdk,
        )

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

    def _send(self, request: SummaryRequest, model: str) -> Any:
        return self._client.messages.create(
            model=model,
            extra_headers={"Idempotency-Key": request.idempotency_key},
            **self.request_for(request),
        )

    def _mapped(self, exc: Exception, model: str) -> SummarizerError | None:
        return self.sdk_error(self._sdk, exc, model, "a message")

    def server_error(self, status: int) -> str:
        reason = "overloaded" if status == 529 else f"answered {status}"
        return f"the provider {reason} ({status})"

    def _result(self, response: Any, model: str, latency_ms: float) -> SummaryResult:
        blocks = getattr(response, "content", None)
        if not isinstance(blocks, list):
            raise SummarizerOutputError("the answer has no content", model=model)
        stop = getattr(response, "stop_reason", None)
        if stop == "refusal":
            raise SummarizerOutputError("the model refused to summarize", model=model)
        text = "".join(str(getattr(b, "text", "")) for b in blocks if getattr(b, "type", None) == "text")
        usage = getattr(response, "usage", None)
        prompt = None
        if usage is not None and isinstance(getattr(usage, "input_tokens", None), int):
            prompt = usage.input_tokens + sum(
                getattr(usage, key, None) or 0
                for key in ("cache_creation_input_tokens", "cache_read_input_tokens")
            )
        return summary_result(
            text.strip(),
            model,
            latency_ms,
            answered_by=getattr(response, "model", None),
            input_tokens=prompt,
            output_tokens=getattr(usage, "output_tokens", None),
            cut_off=stop == "max_tokens",
        )
