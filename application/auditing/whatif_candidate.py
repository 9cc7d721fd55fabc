"""The simulated side of a what-if: one conversation under the candidate policy, in
memory, fed the recorded messages and edits, its summaries made at once.

The conversation is a plain ``Conversation`` aggregate that is never saved: its
events are folded into an in-memory history (what edits need of summarized messages
and of earlier summaries) and dropped. See ``contextledger.application.auditing.whatif``.
"""

from __future__ import annotations

from collections.abc import Callable
from uuid import UUID

from contextledger.application.auditing.whatif_results import Tally
from contextledger.application.shared.limits import with_default_cap
from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult, TokenCounter
from contextledger.application.shared.settings import Settings
from contextledger.application.summaries.summary_attempts import attempt_summary
from contextledger.application.summaries.summary_service import record_result, request_for
from contextledger.domain.commands.edits import HistoryFold
from contextledger.domain.conversation import Conversation, SummaryFailure
from contextledger.domain.events import (
    DomainEvent,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    Started,
    SummaryCreated,
    SystemPromptChanged,
    ToolsChanged,
)
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.domain.values.reduction import Entry, SummaryLink

__all__ = ["Budget", "BudgetSpent", "CandidateConversation", "Unreplayable"]


class BudgetSpent(Exception):
    """The next summarizer call would pass the budget."""


class Unreplayable(Exception):
    """A recorded edit cannot be replayed on the simulated conversation (the reason)."""


class Budget:
    """Summarizer calls a what-if may still make (None: no limit)."""

    def __init__(self, calls: int | None) -> None:
        self.limit = calls
        self.used = 0

    def spend(self) -> None:
        if self.limit is not None and self.used >= self.limit:
            raise BudgetSpent
        self.used += 1


class _MemoryHistory:
    """The ``History`` edits need, folded from the simulated conversation's own events."""

    def __init__(self) -> None:
        self.fold = HistoryFold()
        self.texts: dict[int, str] = {}

    def record(self, events: list[DomainEvent]) -> None:
        for event in events:
            self.fold.apply(event)
            if isinstance(event, SummaryCreated):
                self.texts[event.originator_version] = event.text

    def entries(self, from_position: int, through_position: int) -> list[Entry]:
        return self.fold.range(from_position, through_position)

    def summary_text(self, link: SummaryLink) -> str:
        return self.texts[link.version]


class CandidateConversation:
    """One conversation replayed under the candidate policy."""

    def __init__(
        self,
        first: Started,
        candidate: ReductionPolicy,
        *,
        summarizer: Summarizer,
        counter_for: Callable[[str], TokenCounter],
        budget: Budget,
        tally: Tally,
    ) -> None:
        self.summarizer = summarizer
        self.counter = counter_for(first.model)
        self.budget = budget
        self.tally = tally
        self.history = _MemoryHistory()
        #: What ``attempt_summary`` reads of a ledger (defaults: backoff is not waited for).
        self.settings = Settings()
        self._counted = _Counted(summarizer, tally)
        self._at = first.timestamp
        self.conversation = Conversation.start(
            first.originator_id,
            system_prompt=first.system_prompt,
            system_tokens=first.system_tokens,
            model=first.model,
            policy=with_default_cap(candidate, first.model),
            reply_priming=first.reply_priming,
            at=first.timestamp,
            key=first.key,
            tools=first.tools,
            tools_tokens=first.tools_tokens,
        )
        self._settle()

    @property
    def id(self) -> UUID:
        return self.conversation.id

    def replay(self, event: DomainEvent) -> None:
        """Replay one recorded event (messages, tools and edits; others are the
        candidate's to decide), then summarize what it pinned."""
        sim = self.conversation
        at = event.timestamp
        if isinstance(event, MessageAppended):
            sim.append(
                event.message,
                tokens=event.tokens,
                placeholder_tokens=event.placeholder_tokens,
                client_message_id=None,
                at=at,
                items=event.items,
                original=event.original,
                hidden=event.hidden,
            )
        elif isinstance(event, ToolsChanged):
            sim.change_tools(event.tools, tools_tokens=event.tools_tokens, at=at)
        elif isinstance(event, MessagesRetracted):
            self._retract(event)
        elif isinstance(event, MessageEdited):
            sim.edit(
                event.position,
                event.message,
                tokens=event.tokens,
                placeholder_tokens=event.placeholder_tokens,
                history=self.history,
                at=at,
            )
        elif isinstance(event, SystemPromptChanged):
            sim.change_system_prompt(event.system_prompt, tokens=event.system_tokens, at=at)
        else:
            return
        self._settle()
        self._summarize(event)

    def _retract(self, event: MessagesRetracted) -> None:
        sim, at, h = self.conversation, event.timestamp, self.history
        wanted = sorted(event.positions)
        if event.command == "retract":
            got = sim.retract(wanted[0], reason=event.reason, history=h, at=at)
        elif event.command == "rewind":
            got = sim.rewind(wanted[0] - 1, history=h, at=at)
        elif event.command == "pop":
            got = [e.position for e in sim.pop(history=h, at=at)]
        else:
            got = sim.clear(history=h, at=at)
        if sorted(got) != wanted:
            raise Unreplayable(
                f"the {event.command} at version {event.originator_version} retracted {wanted}; "
                f"replayed, it retracts {sorted(got)}"
            )

    def _settle(self) -> None:
        """Fold the events the last command triggered into the history, and drop them."""
        self.history.record(self.conversation.collect_events())

    def _summarize(self, event: DomainEvent) -> None:
        """Summarize the pinned range now (and any range the summary pins next), each
        attempt as the live policy makes one (``attempt_summary``: whatever the
        summarizer raises or answers that is not a summary is a recorded failure); a
        failed range is tried again after the next replayed event."""
        sim = self.conversation
        self._at = event.timestamp
        attempted: set[int] = set()
        while (pending := sim.state.pending) is not None and pending.threshold_version not in attempted:
            attempted.add(pending.threshold_version)
            request = request_for(
                sim, model=self.summarizer.model, key_prefix="whatif:", counter=self.counter
            )
            if request is None:
                return
            self.budget.spend()
            outcome = attempt_summary(self, self._counted, request, _no_backoff)
            if outcome.retry_in is not None:
                return

    # -- SummaryRecorder: what ``attempt_summary`` records through ------------------

    def record_summary(self, request: SummaryRequest, result: SummaryResult) -> None:
        """As the summary service records a result (the same counts, the same gate)."""
        record_result(self.conversation, request, result, self.counter, self._at)
        self._settle()
        self.tally.summaries += 1

    def record_summary_failure(self, request: SummaryRequest, failure: SummaryFailure) -> int:
        attempt = self.conversation.record_summarization_failure(
            failure,
            from_position=request.from_position,
            through_position=request.through_position,
            at=self._at,
            threshold_version=request.threshold_version,
        )
        self._settle()
        return attempt


def _no_backoff(attempt: int) -> float:
    return 0.0


class _Counted:
    """The summarizer, with every call counted in the tally (model, tokens)."""

    def __init__(self, inner: Summarizer, tally: Tally) -> None:
        self.inner = inner
        self.tally = tally

    @property
    def model(self) -> str:
        return self.inner.model

    @model.setter
    def model(self, value: str) -> None:
        self.inner.model = value

    def __repr__(self) -> str:
        return repr(self.inner)

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            result = self.inner.summarize(request)
        except BaseException:
            self.tally.call(request.model, None, None)
            raise
        if isinstance(result, SummaryResult):
            self.tally.call(result.model, result.input_tokens, result.output_tokens)
        else:
            self.tally.call(request.model, None, None)
        return result
