"""``SummarizerContract``: what the ledger relies on from any ``Summarizer``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from uuid import uuid4

from contextledger.application.shared.ports import Summarizer, SummaryRequest, TokenCounter
from contextledger.domain.values.messages import Message

__all__ = ["SummarizerContract", "contract_request"]

#: The summary the contract's request extends.
PREVIOUS = "Ada (user) is allergic to peanuts and flies to Boston on 12 May."


def contract_request(
    budget: int = 120, *, previous: str | None = PREVIOUS, gaps: bool = False
) -> SummaryRequest:
    """The request the contract sends: a previous summary and a tool-call group (with
    ``gaps``, at positions a retraction left gaps between, as ``positions`` says)."""
    messages = tuple(
        Message.from_openai(m)
        for m in [
            {
                "role": "user",
                "content": "Please book the vegetarian meal on my flight. It must be peanut free.",
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "m1",
                        "type": "function",
                        "function": {"name": "book_meal", "arguments": '{"meal": "VGML"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "m1", "content": '{"status": "confirmed", "meal": "VGML"}'},
            {"role": "assistant", "content": "Done: a vegetarian, peanut-free meal is confirmed for 12 May."},
        ]
    )
    return SummaryRequest(
        conversation_id=uuid4(),
        from_position=20,
        through_position=26 if gaps else 23,
        messages=messages,
        previous_summary=previous,
        model="gpt-4o-mini",
        max_summary_tokens=budget,
        idempotency_key="contract",
        positions=(20, 22, 23, 26) if gaps else None,
    )


class SummarizerContract(ABC):
    """Abstract suite (pytest collects only subclasses): a summarizer satisfies the
    port, answers with provenance, keeps within ``max_summary_tokens`` (counted by
    ``budget_counter()``), carries the previous summary forward and, when
    ``deterministic``, answers one request one way. Run it against your adapter::

        # tests/test_my_summarizer.py
        import contextledger as cl
        from contextledger.testing.contracts import SummarizerContract

        from myapp.summaries import MySummarizer


        class TestMySummarizer(SummarizerContract):
            deterministic = False  # a model's answers vary

            def make_summarizer(self) -> cl.Summarizer:
                return MySummarizer(model="gpt-4o-mini")
    """

    #: Set False for adapters whose output may vary between calls.
    deterministic = True

    @abstractmethod
    def make_summarizer(self) -> Summarizer:
        """A fresh summarizer under test."""

    def budget_counter(self) -> TokenCounter:
        """The counter that measures the summary against its budget (tiktoken's, for
        the request's model, by default)."""
        from contextledger.infrastructure.counting.tokens import TiktokenCounter

        return TiktokenCounter("gpt-4o-mini")

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
        assert self.budget_counter().count_text(result.text) <= 40

    def test_it_carries_the_previous_summary_forward(self) -> None:
        text = self.make_summarizer().summarize(contract_request()).text
        assert "peanut" in text.lower() or "Ada" in text

    def test_it_summarizes_a_range_with_gaps(self) -> None:
        # Retracted messages leave gaps: ``positions`` gives each message's position
        # (a summarizer that cites positions takes them from ``request.positioned()``).
        result = self.make_summarizer().summarize(contract_request(gaps=True))
        assert result.text.strip() and result.model

    def test_it_answers_the_same_request_the_same_way_when_deterministic(self) -> None:
        summarizer = self.make_summarizer()
        first, second = (summarizer.summarize(contract_request()).text for _ in range(2))
        assert first.strip() and second.strip()
        if self.deterministic:
            assert first == second
