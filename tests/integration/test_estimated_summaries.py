"""Summaries of Claude and Gemini conversations, whose tokens the ledger estimates:
the default (offline) summarizer, run by the live policy, sizes each summary with the
conversation's counter, so every summary passes the ``max_summary_tokens`` gate the
first time, and the budget a model summarizer is asked for leaves the estimate's
stated error as a margin."""

from __future__ import annotations

import json
from typing import Any

import pytest

import contextledger as cl
from contextledger.application.summaries.summary_service import summary_budget
from contextledger.infrastructure.counting.estimates import counter_for_model
from contextledger.infrastructure.counting.tokens import TiktokenCounter
from contextledger.testing import FakeAnthropicServer, FakeGeminiServer, FakeOpenAIServer, GeminiReply, Reply
from tests.properties.test_corpora import load

POLICY = cl.ReductionPolicy(
    trigger_messages=30, keep_messages=8, max_summary_tokens=60, max_context_tokens=4000
)


def _dialogue(turns: int) -> list[dict[str, Any]]:
    """``turns`` user and assistant messages of the corpus's dialogues, one after another."""
    out: list[dict[str, Any]] = []
    for record in load("plain/sgd_plain.jsonl"):
        out.extend(m for m in record["messages"] if m["role"] in ("user", "assistant"))
        if len(out) >= turns:
            return out[:turns]
    return out


@pytest.mark.parametrize("model", ["claude-sonnet-4-5", "gemini-2.5-flash"])
def test_the_live_policy_summarizes_an_estimated_conversation_without_retrying(
    shared_url: str, model: str
) -> None:
    messages = _dialogue(240)
    settings = cl.Settings(
        database_url=shared_url, poll_interval=0.02, retry_base_seconds=0.01, retry_max_seconds=0.05
    )
    with cl.Ledger.open(settings=settings) as ledger:
        cid = ledger.start("You help with bookings.", model=model, policy=POLICY)
        for message in messages:
            ledger.append(cid, message)
        assert ledger.wait_idle(60)
        kinds = [event.kind for event in ledger.replay(cid)]
        summaries = ledger.summaries(cid)
        assert summaries, "no summary was recorded"
        # One attempt per crossing: not one failure, no retry.
        assert kinds.count("SummarizationFailed") == 0
        assert kinds.count("SummaryCreated") == kinds.count("ThresholdReached") == len(summaries)
        counter = counter_for_model(model)
        for summary in summaries:
            assert summary.tokens == counter.count_text(summary.text) <= POLICY.max_summary_tokens
        if model.startswith("claude-"):
            # The summarizer model's own tokenizer (tiktoken) counts fewer tokens than
            # the Claude estimate: sizing summaries with it is what failed the gate.
            longest = max(summaries, key=lambda s: s.tokens)
            assert TiktokenCounter("gpt-4o-mini").count_text(longest.text) < longest.tokens
        assert ledger.totals(cid).summaries == len(summaries)


def test_a_request_for_an_estimated_conversation_carries_its_counter_and_a_margin(
    sqlite_url: str,
) -> None:
    with cl.Ledger.open(settings=cl.Settings(database_url=sqlite_url)) as ledger:
        for model, budget in (("claude-sonnet-4-5", 48), ("gemini-2.5-pro", 48), ("gpt-4o", 60)):
            cid = ledger.start("sys", model=model, policy=POLICY)
            for message in _dialogue(POLICY.trigger_messages + 2):
                ledger.append(cid, message)
            request = ledger.pending_summary(cid)
            assert request is not None
            assert request.max_summary_tokens == budget
            assert request.token_counter is ledger.counter_for(model)


def test_the_budget_leaves_the_stated_error_of_an_estimating_counter() -> None:
    assert summary_budget(1000, None) == 1000
    assert summary_budget(1000, TiktokenCounter("gpt-4o")) == 1000
    assert summary_budget(1000, counter_for_model("claude-opus-4-1")) == 800
    assert summary_budget(16, counter_for_model("gemini-2.5-flash")) == 12


@pytest.mark.parametrize("kind", ["openai", "anthropic", "gemini"])
def test_model_summarizers_are_asked_for_the_budget_with_the_margin(sqlite_url: str, kind: str) -> None:
    """Each model summarizer, through its real SDK to the local fake server, is given
    the request's budget as the provider's output limit and in its prompt: 80% of
    max_summary_tokens for a Claude conversation (its own count is the provider's)."""
    servers: dict[str, Any] = {
        "openai": FakeOpenAIServer,
        "anthropic": FakeAnthropicServer,
        "gemini": FakeGeminiServer,
    }
    with servers[kind]() as server:
        summarizer: cl.Summarizer
        if kind == "openai":
            server.script(Reply("The user booked a table for two."))
            summarizer = cl.OpenAISummarizer(api_key="sk-test", base_url=server.base_url)
        elif kind == "anthropic":
            server.script(Reply("The user booked a table for two."))
            summarizer = cl.AnthropicSummarizer(api_key="sk-ant-test", base_url=server.base_url)
        else:
            server.script(GeminiReply("The user booked a table for two."))
            summarizer = cl.GeminiSummarizer(api_key="gm-test", base_url=server.url)
        with cl.Ledger.open(sqlite_url, summarizer=summarizer, run_policy=False) as ledger:
            cid = ledger.start("sys", model="claude-sonnet-4-5", policy=POLICY)
            for message in _dialogue(POLICY.trigger_messages + 2):
                ledger.append(cid, message)
            request = ledger.pending_summary(cid)
            assert request is not None and request.max_summary_tokens == 48
            ledger.record_summary(request, summarizer.summarize(request))
            assert len(ledger.summaries(cid)) == 1
        [body] = [r.body for r in server.requests if not r.path.endswith("/count_tokens")]
    limit = body["generationConfig"]["maxOutputTokens"] if kind == "gemini" else body["max_tokens"]
    assert limit == 48
    assert "48 tokens" in json.dumps(body)
