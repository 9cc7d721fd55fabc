"""Claude token counts from Anthropic's token-counting endpoint, through the real
``anthropic`` SDK talking to the local fake server: each message is counted once,
what the endpoint cannot price is estimated, and when the endpoint fails (an error
status, no answer in time) the estimate stands in and nothing is half-written."""

from __future__ import annotations

import time
from typing import Any

import pytest

import contextledger as cl
from contextledger.domain.values.messages import Message
from contextledger.infrastructure.counting.anthropic_counter import AnthropicCountingCounter
from contextledger.infrastructure.counting.estimates import ClaudeCounter
from contextledger.testing.fake_anthropic import FakeAnthropicServer

MODEL = "claude-sonnet-4-5"
ESTIMATE = ClaudeCounter(MODEL)
QUESTION = "Which of the three parcels left the depot first, and when will it arrive? " * 3
ANSWER = "The blue parcel left at 9:40 and arrives tomorrow before noon, as booked."
CALL = {
    "role": "assistant",
    "content": None,
    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "track", "arguments": '{"id": 1}'}}],
}
RESULT = {"role": "tool", "tool_call_id": "c1", "content": "in transit"}


def counted(server: FakeAnthropicServer) -> list[dict[str, Any]]:
    """The bodies of the count_tokens requests the server received."""
    return [r.body for r in server.requests if r.path.endswith("/count_tokens")]


def settings(url: str, server: FakeAnthropicServer, **more: Any) -> cl.Settings:
    return cl.Settings(
        database_url=url,
        anthropic_count_tokens=True,
        anthropic_api_key="sk-ant-test",
        anthropic_base_url=server.base_url,
        run_policy=False,
        **more,
    )


def endpoint_count(text: str) -> int:
    """What the fake server answers for one user turn of ``text``, less the reply's opening."""
    return len(text) // 4 + 4 - ESTIMATE.reply_priming


def test_messages_are_counted_by_the_endpoint_once_each(shared_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(settings=settings(shared_url, server)) as ledger:
        cid = ledger.start(None, model=MODEL)
        counter = ledger.counter_for(MODEL)
        assert isinstance(counter, AnthropicCountingCounter)
        for message in (
            {"role": "user", "content": QUESTION},
            CALL,
            RESULT,
            {"role": "assistant", "content": ANSWER},
        ):
            ledger.append(cid, message)
        ledger.append(cid, {"role": "user", "content": QUESTION})  # the same message again
        tokens = [entry.tokens for entry in ledger.transcript(cid)]
        gpt = ledger.start(None, model="gpt-4o")
        ledger.append(gpt, {"role": "user", "content": QUESTION})
    assert (
        tokens[0]
        == tokens[4]
        == endpoint_count(QUESTION)
        != ESTIMATE.count_message(Message(role="user", content=QUESTION))
    )
    assert tokens[3] == endpoint_count(ANSWER)
    # A lone tool call or tool result is no valid request: those are estimated.
    assert tokens[1] == ESTIMATE.count_message(Message.from_openai(CALL))
    assert tokens[2] == ESTIMATE.count_message(Message.from_openai(RESULT))
    bodies = counted(server)
    assert [b["messages"] for b in bodies] == [
        [{"role": "user", "content": QUESTION}],
        [{"role": "user", "content": ANSWER}],
    ]
    assert all(b["model"] == MODEL for b in bodies)
    assert counter.calls == 2 and counter.failures == 0


def test_a_failing_endpoint_leaves_the_estimate_and_is_asked_again_later(sqlite_url: str) -> None:
    with FakeAnthropicServer() as server:
        server.count_status = 500
        now = [100.0]
        counter = AnthropicCountingCounter(
            MODEL, api_key="sk-ant-test", base_url=server.base_url, retry_after=30.0, clock=lambda: now[0]
        )
        question = Message(role="user", content=QUESTION)
        assert counter.count_message(question) == ESTIMATE.count_message(question)
        assert (counter.calls, counter.failures, len(counted(server))) == (1, 1, 1)
        # Within retry_after the endpoint is not asked again.
        assert counter.count_message(Message(role="user", content=ANSWER)) == ESTIMATE.count_message(
            Message(role="user", content=ANSWER)
        )
        assert len(counted(server)) == 1
        server.count_status = None
        now[0] += 31.0
        assert counter.count_message(question) == endpoint_count(QUESTION)
        assert (counter.calls, counter.failures, len(counted(server))) == (2, 1, 2)

        # Through a ledger: the append succeeds, with the estimate.
        server.count_status = 503
        with cl.Ledger.open(settings=settings(sqlite_url, server)) as ledger:
            cid = ledger.start(None, model=MODEL)
            ledger.append(cid, {"role": "user", "content": ANSWER})
            [entry] = ledger.transcript(cid)
            assert entry.tokens == ESTIMATE.count_message(Message(role="user", content=ANSWER))
            assert ledger.totals(cid).messages == 1


def test_an_endpoint_that_does_not_answer_in_time_leaves_the_estimate(sqlite_url: str) -> None:
    slow = FakeAnthropicServer(delay=2.0)
    with (
        slow as server,
        cl.Ledger.open(settings=settings(sqlite_url, server, count_tokens_timeout=0.3)) as ledger,
    ):
        cid = ledger.start(None, model=MODEL)
        started = time.monotonic()
        ledger.append(cid, {"role": "user", "content": QUESTION})
        ledger.append(cid, {"role": "assistant", "content": ANSWER})
        elapsed = time.monotonic() - started
        tokens = [entry.tokens for entry in ledger.transcript(cid)]
        counter = ledger.counter_for(MODEL)
    assert tokens == [
        ESTIMATE.count_message(Message(role="user", content=QUESTION)),
        ESTIMATE.count_message(Message(role="assistant", content=ANSWER)),
    ]
    # One timeout, then the estimate without asking (not one timeout per message).
    assert elapsed < 1.5
    assert isinstance(counter, AnthropicCountingCounter)
    assert (counter.calls, counter.failures) == (1, 1)


def test_the_setting_needs_an_api_key_and_reads_the_environment() -> None:
    with pytest.raises(cl.ConfigurationError) as raised:
        cl.Settings(anthropic_count_tokens=True)
    assert "anthropic_api_key" in raised.value.message
    read = cl.Settings.from_env(
        {
            "CONTEXTLEDGER_ANTHROPIC_COUNT_TOKENS": "true",
            "ANTHROPIC_API_KEY": "sk-ant-x",
            "ANTHROPIC_BASE_URL": "http://127.0.0.1:9",
            "CONTEXTLEDGER_COUNT_TOKENS_TIMEOUT": "2.5",
        }
    )
    assert read.anthropic_count_tokens is True and read.count_tokens_timeout == 2.5
    assert read.anthropic_api_key is not None and read.anthropic_api_key.get_secret_value() == "sk-ant-x"
    assert "sk-ant-x" not in repr(read)
    assert cl.Settings.from_env({}).anthropic_count_tokens is False
