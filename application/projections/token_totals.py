"""The ``token_totals`` read model: token counters per conversation."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ReadModelProjection, TokenTotalsView
from contextledger.domain import events

__all__ = ["TokenTotalsProjection"]


class TokenTotalsProjection(ReadModelProjection[TokenTotalsView]):
    """``token_totals``: counters per conversation (the global totals are their sum)."""

    name = "token_totals"
    topics = (
        events.Started.TOPIC,
        events.MessageAppended.TOPIC,
        events.SummaryCreated.TOPIC,
        events.SummarizationFailed.TOPIC,
        events.UsageRecorded.TOPIC,
    )

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(events.Started)
    def _started(self, event: events.Started, tracking: Tracking) -> None:
        system = event.system_tokens if event.system_prompt is not None else 0
        self.view.start_totals(
            event.originator_id, base_tokens=system + event.reply_priming, tracking=tracking
        )

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id, tracking=tracking, messages=1, appended_tokens=event.tokens
        )

    @process_event.register(events.SummaryCreated)
    def _summary(self, event: events.SummaryCreated, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            summaries=1,
            summarizer_calls=1,
            summarizer_input_tokens=event.provenance.input_tokens or 0,
            summarizer_output_tokens=event.provenance.output_tokens or 0,
        )

    @process_event.register(events.SummarizationFailed)
    def _failed(self, event: events.SummarizationFailed, tracking: Tracking) -> None:
        called = 1 if event.called_provider else 0
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            summarizer_failures=1,
            summarizer_calls=called,
            summarizer_input_tokens=(event.input_tokens or 0) * called,
            summarizer_output_tokens=(event.output_tokens or 0) * called,
        )

    @process_event.register(events.UsageRecorded)
    def _usage(self, event: events.UsageRecorded, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            provider_prompt_tokens=event.prompt_tokens,
            provider_completion_tokens=event.completion_tokens,
        )
