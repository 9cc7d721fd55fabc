"""``TokenCounterContract``: what the ledger relies on from any ``TokenCounter``."""

from __future__ import annotations

from abc import ABC, abstractmethod

from contextledger.application.shared.ports import TokenCounter
from contextledger.domain.values.messages import Message

__all__ = ["TokenCounterContract"]


class TokenCounterContract(ABC):
    """Abstract suite (pytest collects only subclasses): a counter satisfies the port,
    counts deterministically, counts more for more text, and counts every part of a
    message (name, tool calls, content parts) on top of its text. Run it against your
    adapter::

        # tests/test_my_counter.py
        import contextledger as cl
        from contextledger.testing.contracts import TokenCounterContract

        from myapp.tokens import MyCounter


        class TestMyCounter(TokenCounterContract):
            def make_counter(self) -> cl.TokenCounter:
                return MyCounter("my-model")
    """

    @abstractmethod
    def make_counter(self) -> TokenCounter:
        """A fresh counter under test."""

    def test_it_satisfies_the_port(self) -> None:
        counter = self.make_counter()
        assert isinstance(counter, TokenCounter)
        assert isinstance(counter.reply_priming, int) and counter.reply_priming >= 0

    def test_counts_are_deterministic_and_grow_with_the_text(self) -> None:
        counter = self.make_counter()
        short, long = "hello", "hello " * 200
        assert counter.count_text(short) == counter.count_text(short)
        assert counter.count_text(long) > counter.count_text(short) > 0
        assert counter.count_text("") == 0

    def test_a_message_costs_more_than_its_text(self) -> None:
        counter = self.make_counter()
        message = Message(role="user", content="what is the weather in Paris?")
        assert counter.count_message(message) > counter.count_text(message.text)

    def test_every_part_of_a_message_is_counted(self) -> None:
        counter = self.make_counter()
        bare = Message(role="assistant", content="ok")
        named = Message(role="assistant", content="ok", name="agent_smith")
        calling = Message.from_openai(
            {
                "role": "assistant",
                "content": "ok",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"city": "Paris"}'},
                    }
                ],
            }
        )
        parts = Message.from_openai(
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "ok"},
                    {"type": "text", "text": "and a second paragraph of text"},
                ],
            }
        )
        assert counter.count_message(named) > counter.count_message(bare)
        assert counter.count_message(calling) > counter.count_message(bare)
        assert counter.count_message(parts) > counter.count_message(Message(role="user", content="ok"))
