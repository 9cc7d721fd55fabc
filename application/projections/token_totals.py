"""The ``token_totals`` read model: token counters per conversation."""

from __future__ import annotations

from typing import Any

from eventsourcing.dispatch import singledispatchmethod
from eventsourcing.persistence import Tracking

from contextledger.application.projections.base import ReadModelProjection, TokenTotalsView
from contextledger.application.shared.results import SharedHistory
from contextledger.domain import events
from contextledger.domain.erasure import ContentErased

__all__ = ["TokenTotalsProjection"]


class TokenTotalsProjection(ReadModelProjection[TokenTotalsView]):
    """``token_totals``: counters per conversation, equal to ``Ledger.totals(cid)``
    after any sequence of appends, edits and forks (the global totals are their sum,
    a fork's shared history counted once)."""

    name = "token_totals"
    topics = (
        events.Started.TOPIC,
        events.Forked.TOPIC,
        events.MessageAppended.TOPIC,
        events.MessageEdited.TOPIC,
        events.MessagesRetracted.TOPIC,
        events.SystemPromptChanged.TOPIC,
        events.ToolsChanged.TOPIC,
        events.SummaryCreated.TOPIC,
        events.SummaryInvalidated.TOPIC,
        events.SummarizationFailed.TOPIC,
        events.UsageRecorded.TOPIC,
        ContentErased.TOPIC,
    )

    @singledispatchmethod
    def process_event(self, domain_event: Any, tracking: Tracking) -> None:
        self.view.insert_tracking(tracking)

    @process_event.register(ContentErased)
    def _content_erased(self, event: ContentErased, tracking: Tracking) -> None:
        self.erase_rows(event, tracking)

    @process_event.register(events.Started)
    def _started(self, event: events.Started, tracking: Tracking) -> None:
        system = event.system_tokens if event.system_prompt is not None else 0
        self.view.start_totals(
            event.originator_id,
            base_tokens=system + event.reply_priming,
            system_tokens=system,
            tools_tokens=event.tools_tokens,
            key=event.key,
            tracking=tracking,
        )

    @process_event.register(events.Forked)
    def _forked(self, event: events.Forked, tracking: Tracking) -> None:
        state = event.state
        system = int(state.get("system_tokens", 0)) if state.get("system_prompt") is not None else 0
        shared = SharedHistory.of(event)
        self.view.start_totals(
            event.originator_id,
            base_tokens=system + int(state.get("reply_priming", 0)),
            system_tokens=system,
            tools_tokens=int(state.get("tools_tokens", 0)),
            key=event.key,
            tracking=tracking,
            messages=shared.messages,
            appended_tokens=shared.appended_tokens,
            retracted_messages=shared.retracted_messages,
            edited_messages=shared.edited_messages,
            live_tokens_delta=int(state.get("live_tokens_delta", 0)),
            inherited_messages=shared.messages,
            inherited_tokens=shared.appended_tokens,
            inherited_retracted=shared.retracted_messages,
            inherited_edited=shared.edited_messages,
            summaries=shared.summaries,
            inherited_summaries=shared.summaries,
        )

    @process_event.register(events.MessageAppended)
    def _message(self, event: events.MessageAppended, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id, tracking=tracking, messages=1, appended_tokens=event.tokens
        )

    @process_event.register(events.MessageEdited)
    def _edited(self, event: events.MessageEdited, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            edited_messages=1,
            live_tokens_delta=event.tokens - event.replaced_tokens,
        )

    @process_event.register(events.MessagesRetracted)
    def _retracted(self, event: events.MessagesRetracted, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id,
            tracking=tracking,
            retracted_messages=len(set(event.positions)),
            live_tokens_delta=-event.tokens,
        )

    @process_event.register(events.SystemPromptChanged)
    def _system_prompt(self, event: events.SystemPromptChanged, tracking: Tracking) -> None:
        system = event.system_tokens if event.system_prompt is not None else 0
        self.view.set_in_totals(event.originator_id, tracking=tracking, system_tokens=system)

    @process_event.register(events.ToolsChanged)
    def _tools(self, event: events.ToolsChanged, tracking: Tracking) -> None:
        self.view.set_in_totals(event.originator_id, tracking=tracking, tools_tokens=event.tools_tokens)

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

    @process_event.register(events.SummaryInvalidated)
    def _invalidated(self, event: events.SummaryInvalidated, tracking: Tracking) -> None:
        self.view.add_to_totals(
            event.originator_id, tracking=tracking, summaries_invalidated=len(event.invalidated_versions)
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
            estimated_prompt_tokens=event.estimated_prompt_tokens,
            usage_records=1,
            cache_read_tokens=event.cache_read_tokens or 0,
            cache_creation_tokens=event.cache_creation_tokens or 0,
            reduction_hits=1 if event.reduction == "hit" else 0,
            reduction_misses=1 if event.reduction == "miss" else 0,
        )
