"""Contract for ``Summarizer`` adapters. Subclass it and provide ``make_summarizer()``
(and, for a remote adapter, whatever it needs to answer):

    class TestMySummarizer(SummarizerContract):
        def make_summarizer(self) -> Summarizer:
            return MySummarizer(...)
"""

from __future__ import annotations

from uuid import uuid4

from contextledger.application import Summarizer, SummaryRequest
from contextledger.domain import Message
from contextledger.infrastructure.tokens import TiktokenCounter

COUNTER = TiktokenCounter("gpt-4o-mini")
PREVIOUS = "Ada (user) is allergic to peanuts and flies to Boston on 12 May."


def contract_request(budget: int = 120, previous: str | None = PREVIOUS) -> SummaryRequest:
    messages = tuple(Message.from_openai(m) for m in [
        {"role": "user", "content": "Please book the vegetarian meal on my flight. It must be peanut free."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "m1", "type": "function", "function": {"name": "book_meal", "arguments": '{"meal": "VGML"}'}}]},
        {"role": "tool", "tool_call_id": "m1", "content": '{"status": "confirmed", "meal": "VGML"}'},
        {"role": "assistant", "content": "Done: a vegetarian, peanut-free meal is confirmed for 12 May."},
    ])
    return SummaryRequest(conversation_id=uuid4(), from_position=20, through_position=23, messages=messages,
                          previous_summary=previous, model="gpt-4o-mini", max_summary_tokens=budget,
                          idempotency_key="contract")


class SummarizerContract:
    """Abstract (not collected): what the ledger relies on from a summarizer."""

    #: Set False for adapters whose output may vary between calls.
    deterministic = True

    def make_summarizer(self) -> Summarizer:  # pragma: no cover - overridden
        raise NotImplementedError

    def test_it_satisfies_the_port(self) -> None:
        summarizer = self.make_summarizer()
        assert isinstance(summarizer, Summarizer) and summarizer.model

    def test_it_returns_a_non_empty_summary_with_provenance(self) -> None:
        result = self.make_summarizer().summarize(contract_request())
        assert result.text.strip()
        assert result.model and result.prompt_version
        assert result.latency_ms >= 0

    def test_it_stays_within_max_summary_tokens(self) -> None:
        result = self.make_summarizer().summarize(contract_request(budget=40))
        assert COUNTER.count_text(result.text) <= 40

    def test_it_carries_the_previous_summary_forward(self) -> None:
        text = self.make_summarizer().summarize(contract_request()).text
        assert "peanut" in text.lower() or "Ada" in text

    def test_it_answers_the_same_request_the_same_way_when_deterministic(self) -> None:
        if not self.deterministic:
            return
        summarizer = self.make_summarizer()
        assert summarizer.summarize(contract_request()).text == summarizer.summarize(contract_request()).text
