"""Tool definitions have a byte limit (``max_tools_bytes``), checked before any of
their tokens are counted, with an error that names the tools."""

from __future__ import annotations

from typing import Any

import pytest

import contextledger as cl
from contextledger.domain.values.messages import Message


class CountingCounter:
    """The real tiktoken counter, keeping the sizes of the texts it was given."""

    def __init__(self) -> None:
        self.inner = cl.TiktokenCounter("gpt-4o-mini")
        self.reply_priming = self.inner.reply_priming
        self.texts: list[int] = []

    def count_text(self, text: str) -> int:
        self.texts.append(len(text))
        return self.inner.count_text(text)

    def count_message(self, message: Message) -> int:
        self.texts.append(len(message.text))
        return self.inner.count_message(message)

    def count_tools(self, tools: list[dict[str, Any]]) -> int:
        self.texts.append(sum(len(str(t)) for t in tools))
        return int(self.inner.count_tools(tools))


def tool(name: str, description: str) -> dict[str, Any]:
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
    }}


HUGE = [tool("lookup", "fine"), tool("search", "x" * 5_000_000)]


def test_huge_tool_definitions_are_refused_before_their_tokens_are_counted() -> None:
    counter = CountingCounter()
    with cl.Ledger.open("memory://", run_policy=False, token_counter=counter) as ledger:
        with pytest.raises(cl.MessageTooLargeError) as caught:
            ledger.start("You look things up.", tools=HUGE)
        error = caught.value
        assert error.field == "tools" and error.setting == "max_tools_bytes" and error.unit == "bytes"
        assert error.limit == 1_000_000 and error.size is not None and error.size > 5_000_000
        assert "tool definitions" in error.message and "system prompt" not in error.message
        assert max(counter.texts, default=0) < 1_000  # nothing large was tokenized
        assert ledger.conversation_ids() == []  # nothing written

        cid = ledger.start("You look things up.", tools=HUGE[:1])
        with pytest.raises(cl.MessageTooLargeError, match="max_tools_bytes"):
            ledger.change_tools(cid, HUGE)
        assert max(counter.texts) < 1_000
        assert [t["function"]["name"] for t in ledger.tools(cid)] == ["lookup"]


def test_the_limit_is_a_setting() -> None:
    settings = cl.Settings.from_env({"CONTEXTLEDGER_MAX_TOOLS_BYTES": "2048"}, database_url="memory://",
                                    run_policy=False)
    assert settings.max_tools_bytes == 2048
    three_kb = [tool("search", "z " * 1500)]
    with cl.Ledger.open(settings=settings) as ledger:
        with pytest.raises(cl.MessageTooLargeError) as caught:
            ledger.start("You look things up.", tools=three_kb)
        assert caught.value.limit == 2048
    with cl.Ledger.open("memory://", run_policy=False) as ledger:  # the default takes them
        cid = ledger.start("You look things up.", tools=three_kb)
        assert ledger.totals(cid).tools_tokens > 1000
    with pytest.raises(cl.ConfigurationError, match="max_tools_bytes"):
        cl.Settings(max_tools_bytes=10)


def test_tools_under_the_byte_limit_but_over_the_cap_are_named_in_the_refusal() -> None:
    policy = cl.ReductionPolicy(trigger_messages=10, keep_messages=2, max_context_tokens=2000)
    with cl.Ledger.open("memory://", run_policy=False) as ledger, pytest.raises(cl.InvalidPolicyError) as caught:
        ledger.start("You look things up.", policy=policy, tools=[tool("search", "w " * 3000)])
    assert "and the tools (" in caught.value.message
