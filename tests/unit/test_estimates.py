"""Token estimates for Claude and Gemini models stay within their stated bound.

No real Claude or Gemini tokenizer runs here, so the bound is checked against what
the calibration rests on (``infrastructure/counting/estimates.py``): the published ratio range
of Claude's count to cl100k's (1.0..1.35), and the published characters-a-token rules
(Claude about 3.5, Gemini about 4) on the corpora's English prose.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.shared.counting import ESTIMATE_ERRORS, relative_error
from contextledger.domain import Message
from contextledger.infrastructure.counting.estimates import ClaudeCounter, GeminiCounter, counter_for_model
from contextledger.infrastructure.counting.tokens import TiktokenCounter
from tests.conftest import CORPORA

CL100K = TiktokenCounter("gpt-4")
O200K = TiktokenCounter("gpt-4o")
CLAUDE = ClaudeCounter("claude-sonnet-4-5")
GEMINI = GeminiCounter("gemini-2.5-flash")
#: Anthropic's published range of its tokenizers' count relative to cl100k's (see
#: the module's notes): the true count of a text lies in it.
CLAUDE_RATIO = (1.0, 1.35)
PROSE = ("plain/hh_rlhf_harmless_test.jsonl", "plain/sgd_plain.jsonl")


def corpus_texts(limit: int = 150) -> Iterator[tuple[str, str]]:
    """``(file, text)`` for each string content and tool-call arguments of the
    first ``limit`` conversations of every corpus file."""
    for path in sorted(CORPORA.glob("*/*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for index, line in enumerate(lines):
                if index >= limit:
                    break
                for message in json.loads(line)["messages"]:
                    content = message.get("content")
                    if isinstance(content, str) and content:
                        yield path.name, content
                    for call in message.get("tool_calls") or ():
                        yield path.name, call["function"]["arguments"]


def corpus_conversations(limit: int = 50) -> Iterator[list[dict[str, Any]]]:
    for path in sorted(CORPORA.glob("*/*.jsonl")):
        with path.open(encoding="utf-8") as lines:
            for index, line in enumerate(lines):
                if index >= limit:
                    break
                yield json.loads(line)["messages"]


def test_claude_and_gemini_models_are_estimated_and_others_keep_tiktoken() -> None:
    assert isinstance(counter_for_model("claude-opus-4-1"), ClaudeCounter)
    assert isinstance(counter_for_model("anthropic/claude-3-5-haiku"), ClaudeCounter)
    assert isinstance(counter_for_model("gemini-2.5-pro"), GeminiCounter)
    for model in ("gpt-4o-mini", "gpt-4", "llama-3-70b", "mistral-large"):
        counter = counter_for_model(model)
        assert type(counter) is TiktokenCounter
        assert counter.count_text("hello world") == TiktokenCounter(model).count_text("hello world")
        assert relative_error(model) == 0
    assert CLAUDE.relative_error == relative_error("claude-x") == ESTIMATE_ERRORS["claude-"] > 0
    assert GEMINI.relative_error == relative_error("gemini-x") == ESTIMATE_ERRORS["gemini-"] > 0


def test_a_ledger_counts_a_claude_conversation_with_the_claude_estimate(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url) as ledger:
        claude = ledger.start("Be brief.", model="claude-haiku-4-5")
        openai = ledger.start("Be brief.", model="gpt-4o-mini")
        text = "Which flights leave Paris for Rome tomorrow morning, and how much is a seat?"
        for cid in (claude, openai):
            ledger.append(cid, {"role": "user", "content": text})
        claude_totals, openai_totals = ledger.totals(claude), ledger.totals(openai)
    assert claude_totals.context_tokens == CLAUDE.count_messages(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    )
    assert openai_totals.context_tokens == O200K.count_messages(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": text}]
    )
    assert openai_totals.estimate_error_bound == 0
    assert claude_totals.estimate_error_bound == math.ceil(0.20 * claude_totals.context_tokens)


def test_every_corpus_text_is_within_the_bound_of_any_claude_count_the_published_range_allows() -> None:
    bound = CLAUDE.relative_error
    checked = 0
    for name, text in corpus_texts():
        base = CL100K.count_text(text)
        estimate = CLAUDE.count_text(text)
        for ratio in CLAUDE_RATIO:
            truth = ratio * base
            assert abs(estimate - truth) <= bound * truth + 1, (name, text[:80], estimate, truth)
        checked += 1
    assert checked > 1000


@pytest.mark.parametrize("name", PROSE)
@pytest.mark.parametrize(
    ("counter", "chars_per_token"), [(CLAUDE, 3.5), (GEMINI, 4.0)], ids=["claude", "gemini"]
)
def test_on_english_prose_the_estimate_is_within_the_bound_of_the_published_characters_rule(
    name: str, counter: Any, chars_per_token: float
) -> None:
    texts = [text for file, text in corpus_texts(300) if file == name.split("/")[1]]
    # Enough texts for the rule to hold on average: the subset the repository carries
    # (tests/fixtures/corpora) holds 294 and 434, the full corpora several thousand.
    assert len(texts) >= 250
    estimate = sum(counter.count_text(t) for t in texts)
    rule = sum(len(t) for t in texts) / chars_per_token
    assert abs(estimate - rule) <= counter.relative_error * rule, (estimate, rule)


def test_whole_corpus_prompts_are_within_the_bound_of_the_published_range_with_framing() -> None:
    """A prompt's estimate is its texts' plus framing: with the framing the same, a
    true count in the published range stays within the bound of the whole prompt."""
    for messages in corpus_conversations():
        estimate = CLAUDE.count_messages(messages)
        texts = (
            sum(CL100K.count_text(m["content"]) for m in messages if isinstance(m.get("content"), str))
            + sum(
                CL100K.count_text(c["function"]["name"]) + CL100K.count_text(c["function"]["arguments"])
                for m in messages
                for c in m.get("tool_calls") or ()
            )
            + sum(CL100K.count_text(m["tool_call_id"]) for m in messages if m.get("tool_call_id"))
        )
        framing = (
            estimate
            - sum(CLAUDE.count_text(m["content"]) for m in messages if isinstance(m.get("content"), str))
            - sum(
                CLAUDE.count_text(c["function"]["name"]) + CLAUDE.count_text(c["function"]["arguments"])
                for m in messages
                for c in m.get("tool_calls") or ()
            )
            - sum(CLAUDE.count_text(m["tool_call_id"]) for m in messages if m.get("tool_call_id"))
        )
        assert framing >= CLAUDE.reply_priming + CLAUDE.per_message * len(messages)
        for ratio in CLAUDE_RATIO:
            truth = ratio * texts + framing
            assert abs(estimate - truth) <= CLAUDE.relative_error * truth


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_any_text_is_within_the_bound_of_the_published_claude_range(text: str) -> None:
    base = CL100K.count_text(text)
    estimate = CLAUDE.count_text(text)
    assert estimate >= base
    for ratio in CLAUDE_RATIO:
        assert abs(estimate - ratio * base) <= CLAUDE.relative_error * ratio * base + 1


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_the_gemini_text_estimate_is_the_o200k_count(text: str) -> None:
    assert GEMINI.count_text(text) == O200K.count_text(text)


def test_framing_follows_the_published_figures() -> None:
    user = Message(role="user", content="hi")
    assert CLAUDE.count_message(user) == CLAUDE.per_message + CLAUDE.count_text("hi")
    assert GEMINI.count_messages([{"role": "user", "content": "hi"}]) == 3 + 5 + O200K.count_text("hi")
    image = Message(role="user", content=[{"type": "image_url", "image_url": {"url": "https://x/y.png"}}])
    assert GEMINI.count_message(image) == 5 + 258
    assert CLAUDE.count_message(image) == 4 + 1600
    tools = [
        {
            "type": "function",
            "function": {
                "name": "weather",
                "description": "Weather in a city",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    assert CLAUDE.count_tools(tools) > 346 and CLAUDE.count_tools([]) == 0
    assert CLAUDE.count_tools(tools) == 346 + CLAUDE.count_text(
        json.dumps(tools[0]["function"], sort_keys=True)
    )
    assert GEMINI.count_tools(tools) == O200K.count_text(json.dumps(tools[0]["function"], sort_keys=True))
