"""OpenAI's own compaction as a summarizer: ``OpenAICompactionSummarizer`` calls
``responses.compact`` on the range the policy chose (the policy decides *when*, by its
thresholds, once per crossing; the provider decides *what*).

Its result is a native summary (``SummaryResult.native == "responses"``): the
compacted output (the user messages and one opaque ``compaction`` item) is its
payload, sent as it came to the Responses format, and a readable summary of the same
range by ``readable`` (the offline summarizer unless given) is its text, for every
other format. The SDK's errors are mapped as the OpenAI summarizer maps them, so the
policy's retries and its fallback to the offline summarizer apply as to any other.
``fallback_to_summary=True`` is "native first, a model summary as fallback": when the
compaction fails, ``readable``'s summary is the result (a summary of contextledger's
own), in the same call.
"""

from __future__ import annotations

from typing import Any

import openai

from contextledger.application.ports import Summarizer, SummaryRequest, SummaryResult
from contextledger.domain.errors import SummarizerError, SummarizerOutputError
from contextledger.domain.items import items_from_messages
from contextledger.infrastructure.offline_summarizer import OfflineSummarizer
from contextledger.infrastructure.summarizer_base import ModelSummarizer

__all__ = ["NATIVE_PROMPT_VERSION", "OpenAICompactionSummarizer"]

#: The ``prompt_version`` of its results (the provider's own compaction prompt).
NATIVE_PROMPT_VERSION = "native:responses"


class OpenAICompactionSummarizer(ModelSummarizer):
    """Summarizes a range with OpenAI's ``responses.compact``: a native summary."""

    provider = "OpenAI"
    key_variable = "OPENAI_API_KEY"

    def __init__(
        self,
        *,
        model: str = "gpt-4.1",
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        readable: Summarizer | None = None,
        fallback_to_summary: bool = False,
    ) -> None:
        super().__init__(model=model, api_key=api_key, base_url=base_url, timeout=timeout)
        #: Writes the readable text of each native summary (and the fallback summary).
        self.readable: Summarizer = readable or OfflineSummarizer()
        self.fallback_to_summary = fallback_to_summary
        self._client = openai.OpenAI(
            api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    def __repr__(self) -> str:
        return (
            f"OpenAICompactionSummarizer(model={self.model!r}, base_url={self.base_url!r}, "
            f"readable={self.readable!r}, fallback_to_summary={self.fallback_to_summary}, api_key=***)"
        )

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            native = super().summarize(request)
        except SummarizerError:
            if not self.fallback_to_summary:
                raise
            return self.readable.summarize(request)
        text = self.readable.summarize(request)
        return SummaryResult(
            text=text.text,
            model=native.model,
            prompt_version=NATIVE_PROMPT_VERSION,
            input_tokens=native.input_tokens,
            output_tokens=native.output_tokens,
            latency_ms=native.latency_ms + text.latency_ms,
            native="responses",
            payload=native.payload,
        )

    def input_for(self, request: SummaryRequest) -> list[dict[str, Any]]:
        """What is compacted: the previous summary, then the newly covered messages as items."""
        items: list[dict[str, Any]] = []
        if request.previous_summary:
            items.append(
                {
                    "type": "message",
                    "role": "developer",
                    "content": f"Summary so far:\n{request.previous_summary}",
                }
            )
        items.extend(items_from_messages(request.messages))
        return items

    def _send(self, request: SummaryRequest, model: str) -> Any:
        return self._client.responses.compact(
            model=model,
            input=self.input_for(request),  # type: ignore[arg-type]
            extra_headers={"Idempotency-Key": request.idempotency_key},
        )

    def _mapped(self, exc: Exception, model: str) -> SummarizerError | None:
        return self.sdk_error(openai, exc, model, "a compaction")

    def _result(self, response: Any, model: str, latency_ms: float) -> SummaryResult:
        output = [
            item
            if isinstance(item, dict)
            else item.model_dump(mode="json", exclude_unset=True, warnings=False)
            for item in getattr(response, "output", None) or []
        ]
        if not any(isinstance(i, dict) and i.get("type") == "compaction" for i in output):
            raise SummarizerOutputError("the compaction returned no compaction item", model=model)
        usage = getattr(response, "usage", None)
        return SummaryResult(
            text="(compaction)",
            model=model,
            prompt_version=NATIVE_PROMPT_VERSION,
            input_tokens=getattr(usage, "input_tokens", None),
            output_tokens=getattr(usage, "output_tokens", None),
            latency_ms=latency_ms,
            native="responses",
            payload=tuple(output),
        )
