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

The errors are made by ``summarizer_base.ModelSummarizer``. The API key is never part
of an error message, a log line or a repr.
"""

from __future__ import annotations

from typing import Any

import openai

from contextledger.application.shared.ports import SummaryRequest, SummaryResult
from contextledger.domain.values.errors import SummarizerError, SummarizerOutputError
from contextledger.infrastructure.loopback import direct_if_loopback
from contextledger.infrastructure.summarizers.summarizer_base import ModelSummarizer, summary_result
from contextledger.infrastructure.summarizers.summary_prompt import (
    PROMPT_VERSION,
    SYSTEM_PROMPT,
    render_transcript,
    summary_prompt,
)

__all__ = ["PROMPT_VERSION", "SYSTEM_PROMPT", "OpenAISummarizer", "render_transcript"]


class OpenAISummarizer(ModelSummarizer):
    """Summarizes through the chat-completions API of OpenAI or a compatible server."""

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"

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
        super().__init__(model=model, api_key=api_key, base_url=base_url, timeout=timeout)
        self.temperature = temperature
        # Retries with backoff are the summarization policy's job; the SDK's are off
        # unless asked for.
        self._client = direct_if_loopback(
            openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries),
            openai,
        )

    def messages_for(self, request: SummaryRequest) -> list[dict[str, str]]:
        """The prompt: the previous summary plus only the newly covered messages."""
        system, user = summary_prompt(request)
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def _send(self, request: SummaryRequest, model: str) -> Any:
        return self._client.chat.completions.create(
            model=model,
            messages=self.messages_for(request),  # type: ignore[arg-type]
            max_tokens=request.max_summary_tokens,
            temperature=self.temperature,
            extra_headers={"Idempotency-Key": request.idempotency_key},
        )

    def _mapped(self, exc: Exception, model: str) -> SummarizerError | None:
        return self.sdk_error(openai, exc, model, "a chat completion")

    def _result(self, response: Any, model: str, latency_ms: float) -> SummaryResult:
        choices = getattr(response, "choices", None)
        if not choices:
            raise SummarizerOutputError("the answer has no choices", model=model)
        choice = choices[0]
        text = (getattr(choice.message, "content", None) or "").strip()
        usage = getattr(response, "usage", None)
        return summary_result(
            text,
            model,
            latency_ms,
            answered_by=getattr(response, "model", None),
            input_tokens=getattr(usage, "prompt_tokens", None),
            output_tokens=getattr(usage, "completion_tokens", None),
            cut_off=bool(text) and choice.finish_reason == "length",  # empty is said first
        )
