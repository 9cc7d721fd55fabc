"""The providers' own compaction as a summarizer: ``OpenAICompactionSummarizer`` calls
``responses.compact`` on the range the policy chose, ``AnthropicCompactionSummarizer``
Anthropic's compaction edit (the policy decides *when*, by its thresholds, once per
crossing; the provider decides *what*).

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

from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult
from contextledger.domain.values.errors import SummarizerError, SummarizerOutputError
from contextledger.domain.values.items import items_from_messages
from contextledger.infrastructure.summarizers.anthropic_summarizer import AnthropicSummarizer
from contextledger.infrastructure.summarizers.offline_summarizer import OfflineSummarizer
from contextledger.infrastructure.summarizers.summarizer_base import ModelSummarizer

__all__ = [
    "ANTHROPIC_PROMPT_VERSION",
    "NATIVE_PROMPT_VERSION",
    "AnthropicCompactionSummarizer",
    "OpenAICompactionSummarizer",
]

#: The ``prompt_version`` of their results (the provider's own compaction prompt).
NATIVE_PROMPT_VERSION = "native:responses"
ANTHROPIC_PROMPT_VERSION = "native:anthropic"
#: The beta header value that turns Anthropic's compaction on.
ANTHROPIC_COMPACTION_BETA = "compact-2026-01-12"


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


class AnthropicCompactionSummarizer(AnthropicSummarizer):
    """Summarizes a range with Anthropic's own compaction (the ``compact_20260112`` edit
    under the ``compact-2026-01-12`` beta, paused after the compaction): a native
    summary whose text is the compaction block's summary and whose payload is the block.

    ``trigger_tokens`` is the edit's input-token trigger (the range is always over it, so
    the server compacts it). A block with null content, or an answer without one, is a
    ``SummarizerOutputError``; ``fallback_to_summary=True`` answers it with a plain
    summary by the same model (``AnthropicSummarizer``) in the same call.
    """

    def __init__(
        self,
        *,
        model: str = "claude-haiku-4-5",
        api_key: str | None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 0,
        trigger_tokens: int = 1,
        fallback_to_summary: bool = False,
    ) -> None:
        super().__init__(
            model=model, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )
        self.trigger_tokens = trigger_tokens
        self.fallback_to_summary = fallback_to_summary
        self._summary = AnthropicSummarizer(
            model=model, api_key=api_key, base_url=base_url, timeout=timeout, max_retries=max_retries
        )

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            return super().summarize(request)
        except SummarizerError:
            if not self.fallback_to_summary:
                raise
            return self._summary.summarize(request)

    def _send(self, request: SummaryRequest, model: str) -> Any:
        edit = {
            "type": "compact_20260112",
            "trigger": {"type": "input_tokens", "value": self.trigger_tokens},
            "pause_after_compaction": True,
        }
        return self._client.beta.messages.create(
            model=model,
            betas=[ANTHROPIC_COMPACTION_BETA],
            context_management={"edits": [edit]},
            extra_headers={"Idempotency-Key": request.idempotency_key},
            **self.request_for(request),
        )

    def _result(self, response: Any, model: str, latency_ms: float) -> SummaryResult:
        blocks = [
            b if isinstance(b, dict) else b.model_dump(mode="json", exclude_none=True)
            for b in getattr(response, "content", None) or []
        ]
        found = next((b for b in blocks if b.get("type") == "compaction"), None)
        if found is None:
            raise SummarizerOutputError("the answer holds no compaction block", model=model)
        text = found.get("content")
        if not isinstance(text, str) or not text.strip():
            raise SummarizerOutputError("the provider's compaction returned no summary", model=model)
        usage = getattr(response, "usage", None)
        spent = next(
            (i for i in getattr(usage, "iterations", None) or [] if getattr(i, "type", None) == "compaction"),
            usage,
        )
        return SummaryResult(
            text=text.strip(),
            model=str(getattr(response, "model", None) or model),
            prompt_version=ANTHROPIC_PROMPT_VERSION,
            input_tokens=getattr(spent, "input_tokens", None),
            output_tokens=getattr(spent, "output_tokens", None),
            latency_ms=latency_ms,
            native="anthropic",
            payload=(found,),
        )
