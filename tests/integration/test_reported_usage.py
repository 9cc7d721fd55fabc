"""Provider-reported usage in the trigger and the totals, and prompt-cache figures.

A Claude conversation is counted by estimate; where a reply reported the provider's
count of the prompt, the totals and the trigger use that count for the prefix the
provider saw plus our estimate of what came after. Replies come from the real
Anthropic SDK talking to the local fake server.
"""

from __future__ import annotations

import asyncio
import math
import sqlite3
from typing import Any
from uuid import UUID

import anthropic
import pytest
from google import genai
from google.genai import types

import contextledger as cl
from contextledger.application.formats.anthropic import AnthropicAdapter
from contextledger.application.formats.anthropic_render import render_anthropic
from contextledger.application.formats.originals import context_entries, extend_with_originals
from contextledger.domain.events import UsageRecorded
from contextledger.infrastructure.counting.estimates import ClaudeCounter
from contextledger.testing import FakeGeminiServer, GeminiReply
from contextledger.testing.fake_anthropic import Blocks, FakeAnthropicServer

ADAPTER = AnthropicAdapter()
MODEL = "claude-haiku-4-5"
BOUND = ClaudeCounter(MODEL).relative_error


def usage_events(ledger: cl.Ledger, cid: UUID) -> list[dict[str, Any]]:
    return [e.data for e in ledger.replay(cid) if e.kind == "UsageRecorded"]


def turn(ledger: cl.Ledger, client: anthropic.Anthropic, cid: UUID, text: str) -> Any:
    """Send the context plus a user message, append both with the reply's usage."""
    asked = ADAPTER.decode({"role": "user", "content": text})
    extend_with_originals(ledger, cid, list(zip(asked.messages, asked.originals, strict=True)))
    body = render_anthropic(context_entries(ledger, cid).entries, cache=True)
    reply = client.messages.create(model=MODEL, max_tokens=100, **body)
    usage = ADAPTER.decode(reply).usage
    assert usage is not None
    ledger.commands.record_usage(
        cid,
        usage.prompt_tokens,
        usage.completion_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_creation_tokens=usage.cache_creation_tokens,
    )
    decoded = ADAPTER.decode(reply)
    extend_with_originals(ledger, cid, list(zip(decoded.messages, decoded.originals, strict=True)))
    return usage


def test_totals_use_the_reported_count_for_the_prefix_and_the_estimate_after(shared_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(shared_url) as ledger:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        server.script(
            Blocks(
                [{"type": "text", "text": "Paris is 18C."}],
                input_tokens=300,
                cache_creation_input_tokens=200,
                output_tokens=9,
            )
        )
        cid = ledger.start("You answer about the weather.", model=MODEL)
        before = ledger.totals(cid)
        assert before.estimate_error_bound == math.ceil(BOUND * before.context_tokens) > 0
        usage = turn(ledger, client, cid, "Weather in Paris?")
        assert (usage.prompt_tokens, usage.cache_creation_tokens) == (500, 200)
        [recorded] = usage_events(ledger, cid)
        assert recorded["calibrates"] is True and recorded["cache_creation_tokens"] == 200
        assert recorded["cache_read_tokens"] == 0  # reported as 0, so stored (None is left out)
        totals = ledger.totals(cid)
        # The provider saw the system prompt and the user message: 500 tokens by its
        # count. What came after (the reply) is our estimate, and only it is bounded.
        reply_tokens = totals.appended_tokens - ledger.transcript(cid)[0].tokens
        assert totals.context_tokens == 500 + reply_tokens
        assert totals.estimate_error_bound == math.ceil(BOUND * reply_tokens)
        assert totals.estimated_prompt_tokens == recorded["estimated_prompt_tokens"] != 500
        assert (totals.provider_prompt_tokens, totals.cache_creation_tokens, totals.cache_read_tokens) == (
            500,
            200,
            0,
        )
        # The working memory costs what the totals say, with the same bound, now and
        # as it was before the reply reported the provider's count.
        memory = ledger.working_memory(cid)
        assert (memory.tokens, memory.estimate_error_bound) == (
            500 + reply_tokens,
            totals.estimate_error_bound,
        )
        earlier = ledger.working_memory(cid, version=memory.version - 2)
        assert earlier.tokens == ledger.transcript(cid)[0].tokens + before.context_tokens
        assert earlier.estimate_error_bound == math.ceil(BOUND * earlier.tokens)
        assert totals.uncached_prompt_tokens == 300


def test_a_claude_conversation_reduces_on_the_providers_count(sqlite_url: str) -> None:
    policy = cl.ReductionPolicy(trigger_tokens=2000, keep_tokens=200)
    with (
        FakeAnthropicServer() as server,
        cl.Ledger.open(sqlite_url, summarizer=cl.OfflineSummarizer()) as ledger,
    ):
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        # The provider counts far more than our estimate: 2,500 tokens, over the trigger.
        server.script(
            Blocks([{"type": "text", "text": "Noted."}], input_tokens=150, output_tokens=2),
            Blocks([{"type": "text", "text": "Noted."}], input_tokens=2500, output_tokens=2),
        )
        cid = ledger.start("Keep notes.", model=MODEL, policy=policy)
        twin = ledger.start("Keep notes.", model=MODEL, policy=policy)
        text = "Flight AF1234 leaves Paris at 08:15 and lands in Rome at 10:20. " * 4
        for _ in range(2):
            turn(ledger, client, cid, text)
            for message in ({"role": "user", "content": text}, {"role": "assistant", "content": "Noted."}):
                ledger.append(twin, message)
        ledger.wait_idle()
        assert ledger.totals(twin).context_tokens < 2000  # by our estimate: no reduction
        assert "ThresholdReached" not in [e.kind for e in ledger.replay(twin)]
        kinds = [e.kind for e in ledger.replay(cid)]
        second_report = len(kinds) - 1 - kinds[::-1].index("UsageRecorded")
        assert kinds.index("ThresholdReached") == second_report + 1
        assert ledger.summaries(cid)
        # A summary changed the prefix: the report no longer stands for it.
        totals = ledger.totals(cid)
        assert totals.context_tokens == ledger.conversation(cid).context_tokens()
        assert totals.estimate_error_bound == math.ceil(BOUND * totals.context_tokens)


def test_an_openai_conversation_keeps_its_exact_count(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url) as ledger:
        cid = ledger.start("Be brief.", model="gpt-4o-mini")
        ledger.append(cid, {"role": "user", "content": "hello"})
        estimate = ledger.totals(cid).context_tokens
        ledger.record_usage(cid, prompt_tokens=estimate + 50, completion_tokens=3)
        totals = ledger.totals(cid)
        [recorded] = usage_events(ledger, cid)
    assert totals.context_tokens == estimate and totals.estimate_error_bound == 0
    assert totals.estimate_error == -50
    assert set(recorded) == {
        "through_position",
        "prompt_tokens",
        "completion_tokens",
        "estimated_prompt_tokens",
        "seal",
    }


def test_cache_figures_are_summed_over_calls_and_conversations(shared_url: str) -> None:
    with cl.Ledger.open(shared_url) as ledger:
        first = ledger.start("A", model=MODEL)
        second = ledger.start("B", model="gemini-2.5-flash")
        ledger.commands.record_usage(first, 1000, 10, cache_creation_tokens=900)
        ledger.commands.record_usage(first, 1100, 10, cache_read_tokens=900, cache_creation_tokens=150)
        ledger.commands.record_usage(second, 400, 5, cache_read_tokens=256)
        one, both = ledger.totals(first), ledger.totals()
    assert (one.cache_read_tokens, one.cache_creation_tokens, one.uncached_prompt_tokens) == (900, 1050, 150)
    assert (both.cache_read_tokens, both.cache_creation_tokens) == (1156, 1050)
    assert both.provider_prompt_tokens == 2500 and both.uncached_prompt_tokens == 294


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"cache_read_tokens": 11}, "cache_read_tokens"),
        ({"cache_read_tokens": 6, "cache_creation_tokens": 6}, "cache_read_tokens"),
        ({"cache_creation_tokens": -1}, "cache_creation_tokens"),
        ({"cache_read_tokens": "3"}, "cache_read_tokens"),
        ({"cache_read_tokens": True}, "cache_read_tokens"),
    ],
)
def test_bad_cache_figures_are_refused_and_nothing_is_written(
    sqlite_url: str, kwargs: dict[str, Any], argument: str
) -> None:
    with cl.Ledger.open(sqlite_url) as ledger:
        cid = ledger.start("A", model=MODEL)
        version = ledger.conversation(cid).version
        with pytest.raises(cl.InvalidArgumentError) as raised:
            ledger.commands.record_usage(cid, 10, 1, **kwargs)
        assert raised.value.argument == argument
        assert ledger.conversation(cid).version == version
        assert ledger.totals(cid).usage_records == 0


def test_a_usage_event_stored_before_the_cache_fields_reads_and_seals_as_written(sqlite_url: str) -> None:
    # Records in clear (key_scope="store", no master key), as older versions wrote them.
    with cl.Ledger.open(sqlite_url, settings=cl.Settings(key_scope="store")) as ledger:
        cid = ledger.start("A", model=MODEL)
        ledger.record_usage(cid, prompt_tokens=40, completion_tokens=2)
    # Rewrite the stored event as an older version wrote it: no new fields at all.
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as db:
        rows = db.execute(
            "SELECT originator_version, state FROM stored_events WHERE topic LIKE '%UsageRecorded'"
        ).fetchall()
    assert len(rows) == 1 and b"calibrates" in rows[0][1] and b"cache_read" not in rows[0][1]
    old = UsageRecorded(
        originator_id=cid,
        originator_version=2,
        timestamp="2024-01-01T00:00:00Z",
        through_position=-1,
        prompt_tokens=40,
        completion_tokens=2,
        estimated_prompt_tokens=12,
    ).sealed()
    assert set(old.model_dump(mode="json")) == {
        "originator_id",
        "originator_version",
        "timestamp",
        "through_position",
        "prompt_tokens",
        "completion_tokens",
        "estimated_prompt_tokens",
        "seal",
    }
    assert old.cache_read_tokens is None and old.calibrates is False
    assert UsageRecorded.model_validate(old.model_dump()).expected_seal() == old.seal
    with cl.Ledger.open(sqlite_url) as ledger:
        assert ledger.verify().ok
        assert ledger.totals(cid).cache_read_tokens == 0


def test_an_appended_anthropic_reply_records_its_usage_with_the_cache_figures(shared_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(shared_url, run_policy=False) as ledger:
        client = anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)
        server.script(
            Blocks([{"type": "text", "text": "First."}], input_tokens=40, cache_creation_input_tokens=900),
            Blocks(
                [{"type": "text", "text": "Second."}],
                input_tokens=30,
                cache_read_input_tokens=900,
                cache_creation_input_tokens=60,
            ),
        )
        cid = ledger.start("You answer briefly. " * 50, model=MODEL)
        for text in ("Hello there.", "And again."):
            ledger.append(cid, {"role": "user", "content": text})
            body = ledger.context(cid, format="anthropic", cache=True)
            ledger.append(cid, client.messages.create(model=MODEL, max_tokens=100, **body))
        events = usage_events(ledger, cid)
        totals = ledger.totals(cid)
    assert [(e["prompt_tokens"], e["cache_read_tokens"], e["cache_creation_tokens"]) for e in events] == [
        (940, 0, 900),
        (990, 900, 60),
    ]
    assert all(e["calibrates"] for e in events)  # a Claude count replaces the estimate
    assert (totals.cache_read_tokens, totals.cache_creation_tokens) == (900, 960)
    assert totals.provider_prompt_tokens == 1930 and totals.uncached_prompt_tokens == 70
    assert totals.usage_records == 2 and totals.messages == 4


def test_an_appended_gemini_reply_records_its_usage_with_the_cache_reads(shared_url: str) -> None:
    with FakeGeminiServer() as server, cl.Ledger.open(shared_url, run_policy=False) as ledger:
        client = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=server.url))
        server.script(GeminiReply("Sunny.", prompt_tokens=700, completion_tokens=4, cached_tokens=512))
        cid = ledger.start("Be brief.", model="gemini-2.5-flash")
        ledger.append(cid, types.Content(role="user", parts=[types.Part(text="Weather in Rome?")]))
        body = ledger.context(cid, format="gemini")
        reply = client.models.generate_content(
            model="gemini-2.5-flash",
            contents=body["contents"],
            config={"system_instruction": body["system_instruction"]},
        )
        ledger.append(cid, reply)
        events = usage_events(ledger, cid)
        totals = ledger.totals(cid)
    assert [(e["prompt_tokens"], e["cache_read_tokens"], e["calibrates"]) for e in events] == [
        (700, 512, True)
    ]
    assert (totals.provider_prompt_tokens, totals.cache_read_tokens, totals.cache_creation_tokens) == (
        700,
        512,
        0,
    )


def test_record_usage_takes_the_cache_figures_sync_and_async(sqlite_url: str) -> None:
    with cl.Ledger.open(sqlite_url, run_policy=False) as ledger:
        cid = ledger.start("A", model=MODEL)
        ledger.record_usage(cid, prompt_tokens=1000, completion_tokens=9, cache_read_tokens=800)
        with pytest.raises(cl.InvalidArgumentError) as raised:
            ledger.record_usage(cid, prompt_tokens=10, completion_tokens=1, cache_creation_tokens=11)
        assert raised.value.argument == "cache_creation_tokens"
        totals = ledger.totals(cid)
    assert (totals.usage_records, totals.cache_read_tokens, totals.cache_creation_tokens) == (1, 800, 0)

    async def recorded() -> cl.TokenTotals:
        async with cl.AsyncLedger.open(sqlite_url, run_policy=False) as aledger:
            await aledger.record_usage(
                cid, prompt_tokens=500, completion_tokens=5, cache_read_tokens=100, cache_creation_tokens=300
            )
            return await aledger.totals(cid)

    totals = asyncio.run(recorded())
    assert (totals.usage_records, totals.cache_read_tokens, totals.cache_creation_tokens) == (2, 900, 300)


def test_the_keep_budget_counts_with_the_providers_count_as_the_trigger_does(shared_url: str) -> None:
    # The provider counts three times our estimate: the trigger fires on its count, and
    # the kept messages are bounded by the same count. Counted by the estimate, all of
    # them fit keep_tokens, nothing was pinned and the prompt stayed over its budget.
    policy = cl.ReductionPolicy(trigger_tokens=2000, keep_tokens=1000)
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start("Keep notes.", model=MODEL, policy=policy)
        text = "Flight AF1234 leaves Paris at 08:15 and lands in Rome at 10:20."
        for index in range(26):
            ledger.append(cid, {"role": "user" if index % 2 == 0 else "assistant", "content": text})
        estimate = ledger.totals(cid).context_tokens
        assert 700 < estimate < 1000 and 3 * estimate > 2000  # all of it under keep_tokens by estimate
        ledger.commands.record_usage(cid, 3 * estimate, 5)
        assert ledger.totals(cid).context_tokens == 3 * estimate > 2000
        request = ledger.pending_summary(cid)
        assert request is not None and request.from_position == 0
        state = ledger.conversation(cid).state
        kept = sum(e.tokens for e in state.window if e.position > request.through_position)
        fixed = estimate - sum(e.tokens for e in state.window)
        # What is kept costs at most keep_tokens by the provider's count ...
        assert 3 * (kept + fixed) <= 1000
        # ... and no more could be summarized: the next older message breaks the budget.
        older = next(e for e in state.window if e.position == request.through_position)
        assert 3 * (kept + older.tokens + fixed) > 1000
