"""Invariants every conversation must keep, whatever the policy and the summarizer do."""

from __future__ import annotations

from typing import Any
from uuid import UUID

from contextledger.application import Ledger, SummaryInfo, SummaryRequest, SummaryResult
from contextledger.domain import SummaryQualityError
from contextledger.domain.conversation import Conversation, SummaryFailure
from contextledger.infrastructure.counting.tokens import TiktokenCounter
from contextledger.testing import openai_context_violations

_COUNTER = TiktokenCounter("gpt-4o-mini")


def check(
    ledger: Ledger,
    cid: UUID,
    appended: list[dict[str, Any]],
    *,
    system: str | None,
    conversation: Conversation | None = None,
) -> list[str]:
    """Every invariant broken right now (empty when all hold). ``conversation``: the
    copy of the conversation to check, if the caller took one just now (each copy is
    a deep copy of the aggregate) and nothing wrote since; else one is taken here."""
    problems: list[str] = []
    if conversation is None:
        conversation = ledger.conversation(cid)  # one consistent copy
    messages, context_tokens = conversation.working_memory()
    context = [m.to_openai() for m in messages]
    state = conversation.state
    problems += [f"openai order: {v}" for v in openai_context_violations(context)]
    if system is not None and context[:1] != [{"role": "system", "content": system}]:
        problems.append("the system prompt is not first")
    if appended and not state.open_calls and context[-1] != appended[-1]:
        problems.append(f"the newest message is not last: {context[-1]} != {appended[-1]}")
    # Every message is summarized or in the window, never both, never neither.
    window = [e.position for e in state.window]
    expected = list(range(state.summarized_through + 1, len(appended)))
    if window != expected:
        problems.append(f"window {window[:3]}.. is not the unsummarized positions {expected[:3]}..")
    # The messages themselves, not their dicts: ``context`` is ``to_openai()`` of each,
    # so counting it would only validate each back into the same ``Message``.
    counted = _COUNTER.count_messages(messages)
    if context_tokens != counted:
        problems.append(f"context_tokens {context_tokens} != counted {counted}")
    cap = state.policy.max_context_tokens
    if cap is not None and context_tokens > cap:
        problems.append(f"context_tokens {context_tokens} over the cap {cap}")
    if state.next_position != len(appended):
        problems.append("message count differs from what was appended")
    memory = ledger.working_memory(cid)
    if memory.version == conversation.version and memory.tokens != context_tokens:
        problems.append("working_memory() disagrees with the aggregate")
    if (
        memory.version == conversation.version
        and ledger.totals(cid).context_tokens != memory.tokens
        and ledger.working_memory(cid).version == memory.version
    ):
        problems.append("totals().context_tokens disagrees with working_memory()")
    return problems


def check_log(
    ledger: Ledger, cid: UUID, appended: list[dict[str, Any]], *, summaries: list[SummaryInfo] | None = None
) -> list[str]:
    """Whole-log invariants: nothing lost, summaries contiguous and never overlapping.
    ``summaries``: what ``ledger.summaries(cid)`` returned, if the caller read it just
    now and nothing wrote since (each read decodes the whole log); else read here."""
    problems: list[str] = []
    if [e.message for e in ledger.transcript(cid)] != appended:
        problems.append("the transcript differs from what was appended")
    expected_from = 0
    if summaries is None:
        summaries = ledger.summaries(cid)
    for summary in summaries:
        if summary.from_position != expected_from:
            problems.append(
                f"summary {summary.from_position}-{summary.through_position} does not start at "
                f"{expected_from}"
            )
        if summary.through_position < summary.from_position:
            problems.append("empty summary range")
        expected_from = summary.through_position + 1
    if not ledger.verify(cid).ok:
        problems.append("verify failed")
    return problems


class RecordingSummarizer:
    """Deterministic; remembers every range it was asked for (to prove none twice)."""

    model = "recording"

    def __init__(self) -> None:
        self.ranges: list[tuple[int, int]] = []
        self.seen_positions: set[tuple[UUID, int]] = set()
        self.resent: list[tuple[UUID, int]] = []

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        cid = request.conversation_id
        positions = [(cid, p) for p in range(request.from_position, request.through_position + 1)]
        self.resent += [p for p in positions if p in self.seen_positions]
        self.seen_positions.update(positions)
        self.ranges.append((request.from_position, request.through_position))
        text = f"Covered {request.from_position}-{request.through_position}."
        return SummaryResult(text=text, model=self.model, prompt_version="r1")


def summarize_now(ledger: Ledger, cid: UUID, summarizer: RecordingSummarizer) -> bool:
    request = ledger.pending_summary(cid)
    if request is None:
        return False
    try:
        ledger.record_summary(request, summarizer.summarize(request))
    except SummaryQualityError as exc:
        ledger.record_summary_failure(
            request, SummaryFailure(kind="quality", error=exc.message, retryable=True, called_provider=True)
        )
        return False
    return True
