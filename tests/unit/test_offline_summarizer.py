"""The offline summarizer: deterministic, extractive, within its token budget."""

from __future__ import annotations

from uuid import uuid4

import pytest

from contextledger.application import Summarizer, SummaryRequest
from contextledger.domain import Message
from contextledger.infrastructure.counting.tokens import TiktokenCounter
from contextledger.infrastructure.summarizers.offline_summarizer import OfflineSummarizer
from contextledger.testing.contracts import SummarizerContract

COUNTER = TiktokenCounter("gpt-4o-mini")


def request(messages: list[dict[str, object]], previous: str | None = None, budget: int = 200) -> SummaryRequest:
    return SummaryRequest(conversation_id=uuid4(), from_position=10, through_position=10 + len(messages) - 1,
                          messages=tuple(Message.from_openai(m) for m in messages), previous_summary=previous,
                          model="offline", max_summary_tokens=budget, idempotency_key="k")


CHAT = [
    {"role": "user", "content": "I need to fly from Lisbon to Boston on 12 May. Economy please."},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "search_flights", "arguments": "{}"}}]},
    {"role": "tool", "tool_call_id": "c1", "content": "TP217 departs 10:40, 612 EUR. UA65 departs 12:05, 590 EUR."},
    {"role": "assistant", "content": "I found two flights. We agreed on UA65 for 590 EUR. Anything else?"},
    {"role": "user", "content": "Book it and add a window seat."},
]


def test_the_same_input_gives_the_same_summary() -> None:
    summarizer = OfflineSummarizer(token_counter=COUNTER)
    assert summarizer.summarize(request(CHAT)).text == summarizer.summarize(request(CHAT)).text


def test_it_keeps_requests_decisions_and_tool_outcomes() -> None:
    text = OfflineSummarizer(token_counter=COUNTER).summarize(request(CHAT)).text
    assert "Lisbon to Boston" in text
    assert "tool search_flights -> TP217" in text
    assert "agreed on UA65" in text


@pytest.mark.parametrize("budget", [16, 40, 80])
def test_it_never_exceeds_its_budget_and_is_never_empty(budget: int) -> None:
    result = OfflineSummarizer(token_counter=COUNTER).summarize(request(CHAT * 5, budget=budget))
    assert result.text.strip()
    assert COUNTER.count_text(result.text) <= budget
    assert result.output_tokens == COUNTER.count_text(result.text)


def test_it_extends_the_previous_summary_when_there_is_room() -> None:
    previous = "[0] user: My name is Ada and I am allergic to peanuts."
    text = OfflineSummarizer(token_counter=COUNTER).summarize(request(CHAT, previous=previous)).text
    assert text.startswith(previous)


def test_it_is_never_longer_than_what_it_summarizes() -> None:
    tiny = [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "fine"}]
    result = OfflineSummarizer(token_counter=COUNTER).summarize(request(tiny))
    assert result.text.strip() and COUNTER.count_text(result.text) <= max(8, result.input_tokens or 0)


class TestOfflineSummarizerContract(SummarizerContract):
    def make_summarizer(self) -> Summarizer:
        return OfflineSummarizer(token_counter=COUNTER)


class CallCounter:
    """A token counter that counts how often it is asked."""

    reply_priming = 3

    def __init__(self) -> None:
        self.texts = 0

    def count_text(self, text: str) -> int:
        self.texts += 1
        return COUNTER.count_text(text)

    def count_message(self, message: Message) -> int:
        return 3 + self.count_text(message.text)


@pytest.mark.parametrize("size", [200, 2000])
def test_each_message_and_line_is_counted_once_so_a_long_range_costs_linear_time(size: int) -> None:
    messages = [{"role": "user" if i % 2 == 0 else "assistant",
                 "content": f"Message {i} agreed on order {i}. Then more words about it follow here."}
                for i in range(size)]
    previous = "\n".join(f"[{i}] user: earlier line {i}" for i in range(50))
    counter = CallCounter()
    result = OfflineSummarizer(token_counter=counter).summarize(request(messages, previous, budget=300))
    assert result.output_tokens <= 300
    # The input (the previous summary and each message), each candidate line, each
    # previous line, the result: about 2 counts a message, never one per line per drop.
    assert counter.texts <= 2 * size + 50 + 3
