"""What-if replays: what a candidate reduction policy would have sent, from the log.

``simulate`` reads each conversation's stored events and replays its messages into a
fresh, in-memory ``Conversation`` started with the candidate policy (the recorded
system prompt, model and tools; the token counts stored with each message). Nothing
is written anywhere: the aggregate is never saved, no follower sees it.

- **Turn.** A turn is an append after which the model would be called: a message
  other than an assistant message that leaves no tool call open (a user message,
  a system or developer message, the result that answers a group's last call). A
  turn's context is the working memory as ``context()`` would answer it just before
  the next message is appended or the next edit recorded (or at the end of the log):
  the summary a threshold triggers counts from the turn that crossed it.
- **Recorded side.** The stored events folded in order, the recorded policy (and any
  ``PolicyChanged``) in force: the context at each turn exactly as the log re-derives
  it (``context(cid, version=v)``). A summary the live policy recorded late (after
  the next append) shows from the turn before which it landed.
- **Simulated side.** Summaries are made synchronously, right after the event that
  crossed the threshold, by the chosen summarizer (the live system summarizes in the
  background, so under load its summaries land later). A failed or refused summary
  is recorded in memory (each attempt made as the live policy makes one:
  ``attempt_summary``) and tried again after the next replayed event. Messages,
  ``ToolsChanged`` and the edits (retract, rewind, pop, clear, edit, system prompt
  changes) are replayed, each by its own command, so a summary an edit touches is
  invalidated and redone under the candidate; recorded summaries, thresholds,
  failures, invalidations, policy changes and usage are not (the candidate decides
  those). See ``contextledger.application.auditing.whatif_candidate``.
- **Not simulated.** Forks (their history is another conversation's), conversations
  the candidate policy refuses (a message over its cap) and edits that do not replay
  the same positions: reported with the reason, left out of the sums.
- **Budget.** With ``budget_calls`` the replay stops before the call past the budget;
  the report says where, and both sides cover the turns replayed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast
from uuid import UUID

from contextledger.application.auditing.whatif_candidate import (
    Budget,
    BudgetSpent,
    CandidateConversation,
    Unreplayable,
)
from contextledger.application.auditing.whatif_results import (
    DEFAULT_PRICES,
    ConversationWhatIf,
    ModelPrice,
    Tally,
    WhatIfReport,
    combine,
    parse_prices,
)
from contextledger.application.shared.addressing import ConversationRef, resolve
from contextledger.application.shared.ports import Summarizer, TokenCounter
from contextledger.domain.conversation import Conversation
from contextledger.domain.events import (
    ConversationEvent,
    DomainEvent,
    Forked,
    MessageAppended,
    MessageEdited,
    MessagesRetracted,
    Started,
    SummarizationFailed,
    SummaryCreated,
    SystemPromptChanged,
)
from contextledger.domain.values.errors import (
    ConfigurationError,
    ContextLedgerError,
    ConversationErasedError,
    ConversationNotFoundError,
    InvalidArgumentError,
    InvalidPolicyError,
)
from contextledger.domain.values.policy import ReductionPolicy

__all__ = ["LogSource", "candidate_policy", "choose_summarizer", "simulate_policy"]

#: Recorded events before which a pending turn's context is taken (the next message, or an edit).
_ENDS_TURN = (MessageAppended, MessagesRetracted, MessageEdited, SystemPromptChanged)


@dataclass(frozen=True)
class LogSource:
    """What a what-if reads: the conversations' ids, a conversation's stored events
    (``ConversationNotFoundError`` if unknown) and the token counter of a model."""

    conversation_ids: Callable[[], list[UUID]]
    events: Callable[[UUID], list[DomainEvent]]
    counter_for: Callable[[str], TokenCounter]


def candidate_policy(policy: ReductionPolicy | Mapping[str, Any]) -> ReductionPolicy:
    """``policy``, or a policy from a mapping of its fields (``InvalidPolicyError``)."""
    if isinstance(policy, ReductionPolicy):
        return policy
    if not isinstance(policy, Mapping):
        raise InvalidPolicyError("the policy must be a ReductionPolicy or an object of its fields")
    return ReductionPolicy(**{str(k): v for k, v in policy.items()})


def simulate_policy(
    policy: ReductionPolicy | Mapping[str, Any],
    source: LogSource,
    *,
    summarizer: Summarizer,
    conversations: Iterable[ConversationRef] | ConversationRef | None = None,
    budget_calls: int | None = None,
    prices: Mapping[str, Any] | None = None,
) -> WhatIfReport:
    """Replay the conversations (all when None) under ``policy``; see the module."""
    candidate = candidate_policy(policy)
    if budget_calls is not None and (
        isinstance(budget_calls, bool) or not isinstance(budget_calls, int) or budget_calls < 0
    ):
        raise InvalidArgumentError(
            "budget_calls must be a whole number of 0 or more", argument="budget_calls"
        )
    if not isinstance(summarizer, Summarizer):
        raise ConfigurationError("summarizer must implement the Summarizer port (a model and summarize())")
    table: Mapping[str, ModelPrice] = DEFAULT_PRICES if prices is None else parse_prices(prices)
    known = source.conversation_ids()
    if conversations is None:
        ids = known
    else:
        if isinstance(conversations, str | UUID):
            conversations = [conversations]
        ids = [resolve(ref, argument="conversations") for ref in conversations]
        present = set(known)
        for cid in ids:
            if cid not in present:
                raise ConversationNotFoundError("no such conversation", conversation_id=cid)
    budget = Budget(budget_calls)
    results: list[ConversationWhatIf] = []
    tallies: list[tuple[Tally, Tally]] = []
    stopped: str | None = None
    for index, cid in enumerate(ids):
        try:
            events = source.events(cid)
        except ConversationErasedError:
            if conversations is None:
                continue  # erased: nothing of it is left to replay
            raise
        if stopped is not None:
            results.append(_not_reached(cid, events))
            continue
        replay = _Replay(cid, events, candidate, source, summarizer, budget, table)
        outcome = replay.run()
        results.append(outcome)
        if outcome.simulated is not None:
            tallies.append((replay.recorded, replay.simulated))
        if replay.stopped_at_turn is not None:
            left = len(ids) - index - 1
            stopped = (
                f"stopped at the budget of {budget_calls} summarizer calls in conversation {cid} "
                f"at turn {replay.stopped_at_turn + 1} of {outcome.turns_in_log}"
                + (f"; {left} conversation{'s' if left != 1 else ''} not reached" if left else "")
            )
    recorded, simulated = combine(tallies, table)
    return WhatIfReport(
        policy=candidate,
        summarizer_model=candidate.summarizer_model or summarizer.model,
        conversations=tuple(results),
        recorded=recorded,
        simulated=simulated,
        complete=stopped is None,
        stopped=stopped,
        budget_calls=budget_calls,
        prices=dict(table),
    )


def _not_reached(cid: UUID, events: Sequence[DomainEvent]) -> ConversationWhatIf:
    first = events[0]
    model = first.model if isinstance(first, Started) else ""
    return ConversationWhatIf(
        conversation_id=cid,
        key=getattr(first, "key", None),
        model=model,
        recorded=Tally().figures({}),
        simulated=None,
        recorded_turn_tokens=(),
        simulated_turn_tokens=(),
        turns_in_log=0,
        complete=False,
        reason="not reached: the summarizer call budget ran out",
    )


def _is_turn(event: MessageAppended, conversation: Conversation) -> bool:
    return event.message.role != "assistant" and not conversation.state.open_calls


def _cap_hit(conversation: Conversation) -> bool:
    s = conversation.state
    end = s.open_group_index if s.open_group_index is not None else len(s.window)
    return any(e.position < s.dropped_before for e in s.window[:end])


class _Side:
    """One side's conversation and the context of its previous turn."""

    def __init__(self, conversation: Conversation, tally: Tally) -> None:
        self.conversation = conversation
        self.tally = tally
        self.previous: list[dict[str, Any]] | None = None
        self.turn_tokens: list[int] = []

    def take_turn(self) -> None:
        messages, tokens = self.conversation.working_memory()
        context = [m.to_openai() for m in messages]
        stable = self.previous is not None and context[: len(self.previous)] == self.previous
        self.tally.turn(
            self.conversation.state.model, tokens, prefix_stable=stable, cap_hit=_cap_hit(self.conversation)
        )
        self.turn_tokens.append(tokens)
        self.previous = context


class _Replay:
    """One conversation: the recorded fold and the candidate's replay, side by side."""

    def __init__(
        self,
        cid: UUID,
        events: list[DomainEvent],
        candidate: ReductionPolicy,
        source: LogSource,
        summarizer: Summarizer,
        budget: Budget,
        prices: Mapping[str, ModelPrice],
    ) -> None:
        self.cid = cid
        self.prices = prices
        self.events = events
        self.candidate = candidate
        self.source = source
        self.summarizer = summarizer
        self.budget = budget
        self.recorded = Tally()
        self.simulated = Tally()
        self.stopped_at_turn: int | None = None

    def run(self) -> ConversationWhatIf:
        first = self.events[0]
        turns_in_log = self._turns_in_log()
        if isinstance(first, Forked):
            return self._result(None, turns_in_log, "a fork (its history is another conversation's)")
        if not isinstance(first, Started):
            return self._result(None, turns_in_log, "not a started conversation")
        recorded = _Side(Conversation.apply(None, first), self.recorded)
        simulated: _Side | None = None
        try:
            candidate = CandidateConversation(
                first,
                self.candidate,
                summarizer=self.summarizer,
                counter_for=self.source.counter_for,
                budget=self.budget,
                tally=self.simulated,
            )
            simulated = _Side(candidate.conversation, self.simulated)
            self._replay(recorded, simulated, candidate)
        except BudgetSpent:
            self.stopped_at_turn = len(recorded.turn_tokens)
            return self._result(simulated, turns_in_log, None, recorded)
        except ContextLedgerError as exc:
            self.recorded = Tally()  # a conversation not replayed counts on neither side
            return self._result(None, turns_in_log, f"the candidate policy refuses it: {exc.message}")
        except Unreplayable as exc:
            self.recorded = Tally()
            return self._result(None, turns_in_log, f"its edits do not replay: {exc}")
        return self._result(simulated, turns_in_log, None, recorded)

    def _turns_in_log(self) -> int:
        """The turns of the whole log (a tool result is one when no result follows it)."""
        roles = [e.message.role for e in self.events if isinstance(e, MessageAppended)]
        return sum(
            1
            for i, role in enumerate(roles)
            if role != "assistant" and (role != "tool" or i + 1 == len(roles) or roles[i + 1] != "tool")
        )

    def _replay(self, recorded: _Side, simulated: _Side, candidate: CandidateConversation) -> None:
        turn_pending = False
        rec = recorded.conversation
        for event in self.events[1:]:
            if turn_pending and isinstance(event, _ENDS_TURN):
                recorded.take_turn()
                simulated.take_turn()
                turn_pending = False
            Conversation.apply(rec, cast(ConversationEvent, event))
            if isinstance(event, SummaryCreated):
                self.recorded.summaries += 1
                p = event.provenance
                self.recorded.call(p.model, p.input_tokens, p.output_tokens)
            elif isinstance(event, SummarizationFailed) and event.called_provider:
                model = rec.policy.summarizer_model or "unknown"
                self.recorded.call(model, event.input_tokens, event.output_tokens)
            candidate.replay(event)
            if isinstance(event, MessageAppended):
                turn_pending = _is_turn(event, candidate.conversation)
        if turn_pending:
            recorded.take_turn()
            simulated.take_turn()

    def _result(
        self,
        simulated: _Side | None,
        turns_in_log: int,
        reason: str | None,
        recorded: _Side | None = None,
    ) -> ConversationWhatIf:
        first = self.events[0]
        model = getattr(first, "model", None) or (
            str(first.state.get("model", "")) if isinstance(first, Forked) else ""
        )
        rec_tokens = tuple(recorded.turn_tokens) if recorded is not None and simulated is not None else ()
        return ConversationWhatIf(
            conversation_id=self.cid,
            key=getattr(first, "key", None),
            model=model,
            recorded=self.recorded.figures(self.prices),
            simulated=None if simulated is None else self.simulated.figures(self.prices),
            recorded_turn_tokens=rec_tokens,
            simulated_turn_tokens=tuple(simulated.turn_tokens) if simulated is not None else (),
            turns_in_log=turns_in_log,
            complete=self.stopped_at_turn is None,
            reason=reason,
        )


def choose_summarizer(
    summarizer: Summarizer | str | None, build: Callable[[str], Summarizer], *, openai_configured: bool
) -> Summarizer:
    """The summarizer of a what-if: an instance as given; ``None`` or ``"offline"`` the
    offline one (no network, the default: a what-if never spends money unasked);
    ``"openai"`` the configured OpenAI one (``ConfigurationError`` without an API key)."""
    if summarizer is None or summarizer == "offline":
        return build("offline")
    if summarizer == "openai":
        if not openai_configured:
            raise ConfigurationError(
                "the openai summarizer needs an API key (OPENAI_API_KEY or Settings.openai_api_key)"
            )
        return build("openai")
    if isinstance(summarizer, str):
        raise InvalidArgumentError(
            f"unknown summarizer {summarizer!r}: offline, openai or a Summarizer", argument="summarizer"
        )
    return summarizer
