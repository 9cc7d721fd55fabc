"""The summary service: which summarizer runs, what it is asked, how its answer is kept.

``pending_summary`` turns a conversation's pinned range into a ``SummaryRequest``
(the previous summary plus exactly the newly covered messages); ``record_summary``
and ``record_failure`` write the outcome through the conversation store, where the
aggregate rejects late, duplicate or low-quality results.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from contextledger.application.shared.counting import TokenCounters
from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.shared.settings import Settings
from contextledger.application.storage.store import ConversationStore
from contextledger.domain.conversation import Conversation, SummaryFailure
from contextledger.domain.events import SummaryProvenance
from contextledger.domain.values.digests import summary_source_digest
from contextledger.domain.values.errors import StaleSummaryError
from contextledger.domain.values.messages import Message
from contextledger.domain.values.reduction import Entry, placeholder_message, summary_message

__all__ = ["SummaryService", "record_result", "request_for", "sources", "summary_budget", "summary_input"]


def summary_input(entry: Entry, summarize_hidden: bool) -> Message:
    """What the summarizer is given for ``entry``: its message, or for a tool result
    hidden from the model the placeholder the model sees (unless ``summarize_hidden``)."""
    return placeholder_message(entry) if entry.hidden and not summarize_hidden else entry.message


def sources(conversation: Conversation, request: SummaryRequest) -> tuple[Message, ...]:
    """The messages ``request`` was made from as the log holds them: a hidden tool
    result's own message where the request gave its placeholder (a summary's source
    digest covers the messages it stands for, which ``verify`` recomputes)."""
    hidden = {e.position: e.message for e in conversation.pending_messages_for_summary() if e.hidden}
    return tuple(hidden.get(p, m) for p, m in request.positioned())


def summary_budget(max_summary_tokens: int, counter: TokenCounter | None) -> int:
    """The longest summary to ask a summarizer for, so that the ledger's count of it
    (``counter``'s) stays within the policy's ``max_summary_tokens``. A counter that
    estimates (a ``relative_error`` above 0: Claude, Gemini) may count up to that
    share more than the provider's tokenizer, which a model summarizer sizes its
    answer by: the request leaves that margin (``floor(max * (1 - error))``). An exact
    counter leaves none."""
    error = float(getattr(counter, "relative_error", 0) or 0)
    if error <= 0:
        return max_summary_tokens
    return max(1, math.floor(max_summary_tokens * (1.0 - min(error, 0.5))))


def request_for(
    conversation: Conversation, *, model: str, key_prefix: str = "", counter: TokenCounter | None = None
) -> SummaryRequest | None:
    """The summarization ``conversation`` waits for, as a summarizer request (None when
    nothing is pending); ``model`` when the policy names no summarizer model. The live
    policy and a what-if replay ask the same question this way. ``counter``: the
    conversation's, which measures the summary: the request carries it and a budget
    in the summarizer's terms (``summary_budget``)."""
    pending = conversation.state.pending
    if pending is None:
        return None
    policy = conversation.policy
    entries = conversation.pending_messages_for_summary()
    return SummaryRequest(
        conversation_id=conversation.id,
        from_position=pending.from_position,
        through_position=pending.through_position,
        messages=tuple(summary_input(e, policy.summarize_hidden) for e in entries),
        previous_summary=conversation.previous_summary_text(),
        model=policy.summarizer_model or model,
        max_summary_tokens=summary_budget(policy.max_summary_tokens, counter),
        idempotency_key=f"{key_prefix}{conversation.id}:{pending.threshold_version}",
        attempt=pending.attempts + 1,
        threshold_version=pending.threshold_version,
        positions=tuple(e.position for e in entries),
        token_counter=counter,
    )


def record_result(
    conversation: Conversation,
    request: SummaryRequest,
    result: SummaryResult,
    counter: TokenCounter,
    at: datetime,
) -> None:
    """Record ``result`` for ``request``'s range on ``conversation`` (its counts, its
    source digest over the messages as the log holds them, its provenance). Raises
    ``StaleSummaryError`` if the range is no longer pending (or the summary the request
    extends no longer stands), ``SummaryQualityError``
    if the gate fails."""
    if request.previous_summary != conversation.previous_summary_text():
        # Asked for while another summary stood as the one to extend: one an erasure made
        # unreadable (a fork's inherited summary) or a later change took back.
        pending = conversation.state.pending
        raise StaleSummaryError(
            "the summary was asked for on a previous summary that no longer stands",
            conversation_id=conversation.id,
            from_position=request.from_position,
            through_position=request.through_position,
            pending=(pending.from_position, pending.through_position) if pending else None,
        )
    text = result.text.strip()
    previous = request.previous_summary
    folds = conversation.previous_summary_text() is not None
    if result.native is not None:  # a provider's compaction re-folds all there is
        previous = "\n\n".join(layer.text for layer in conversation.state.summaries) or None
        folds = True
    rendered = summary_message(0 if folds else request.from_position, request.through_position, text)
    conversation.record_summary(
        from_position=request.from_position,
        through_position=request.through_position,
        text=text,
        tokens=counter.count_text(text),
        message_tokens=counter.count_message(rendered),
        source_digest=summary_source_digest(previous, sources(conversation, request)),
        provenance=SummaryProvenance(
            model=result.model,
            prompt_version=result.prompt_version,
            input_tokens=result.input_tokens,
            output_tokens=result.output_tokens,
            latency_ms=result.latency_ms,
        ),
        at=at,
        threshold_version=request.threshold_version,
        native=result.native,
        payload=result.payload,
    )


class SummaryService:
    """Summarizers and the recording of their results for one ledger."""

    def __init__(
        self,
        store: ConversationStore,
        counters: TokenCounters,
        settings: Settings,
        *,
        clock: Callable[[], datetime],
        summarizer: Summarizer | None,
        build: Callable[[str], Any],
    ) -> None:
        self.store = store
        self.counters = counters
        self.settings = settings
        self._clock = clock
        self._summarizer = summarizer
        self._fallback: Summarizer | None = None
        #: ``build(kind)`` makes the "openai" or "offline" summarizer from settings.
        self._build = build

    # -- summarizers ----------------------------------------------------------------

    @property
    def summarizer(self) -> Summarizer:
        """The configured summarizer: OpenAI with an API key, else the offline one."""
        if self._summarizer is None:
            kind = "openai" if self.settings.openai_api_key is not None else "offline"
            self._summarizer = self._build(kind)
        return self._summarizer

    @property
    def fallback(self) -> Summarizer | None:
        """The offline summarizer that takes over a range after
        ``settings.fallback_after_attempts`` failures (None when that is off)."""
        if self.settings.fallback_after_attempts is None:
            return None
        if self._fallback is None:
            self._fallback = self._build("offline")
        return self._fallback

    def model_name(self) -> str:
        """The model a request names when the policy names none."""
        model = getattr(self._summarizer, "model", None)
        return model if isinstance(model, str) and model else self.settings.summarizer_model

    # -- requests and results -------------------------------------------------------

    def pending_summary(self, conversation_id: UUID) -> SummaryRequest | None:
        """The summarization the conversation waits for, as a summarizer request."""

        def request(conversation: Conversation) -> SummaryRequest | None:
            counter = self.counters.for_model(conversation.state.model)
            return request_for(conversation, model=self.model_name(), counter=counter)

        return self.store.read(conversation_id, request)

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """Record ``result`` for ``request``'s range. Raises ``StaleSummaryError`` if
        the range is no longer pending, ``SummaryQualityError`` if the gate fails."""

        def command(conversation: Conversation) -> tuple[None, list[Any]]:
            counter = self.counters.for_model(conversation.state.model)
            record_result(conversation, request, result, counter, self._clock())
            return None, []

        self.store.execute(request.conversation_id, command)

    def record_failure(self, request: SummaryRequest, failure: SummaryFailure) -> int:
        """Record a failed attempt at the pending range; returns the attempt number."""
        return self.store.execute(
            request.conversation_id,
            lambda c: (
                c.record_summarization_failure(
                    failure,
                    from_position=request.from_position,
                    through_position=request.through_position,
                    at=self._clock(),
                    threshold_version=request.threshold_version,
                ),
                [],
            ),
        )
