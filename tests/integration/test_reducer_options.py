"""The reducer design's options, against its own examples (100/10 triggers, "next
trigger at 110", a 4,000-token target with a 1,000-token threshold), on SQLite and
PostgreSQL; renderings are sent through the providers' SDKs to the local fake servers,
which answer a request that breaks the API's rules with a 400."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import anthropic
from google import genai
from google.genai import types

import contextledger as cl
from contextledger.infrastructure.readmodels import attach_read_models
from contextledger.testing import (
    FakeAnthropicServer,
    FakeGeminiServer,
    GeminiReply,
    openai_context_violations,
)
from contextledger.testing.fake_anthropic import Blocks
from tests.support.invariants import RecordingSummarizer, summarize_now

SYSTEM = "You answer travel questions."


def chat(index: int) -> dict[str, Any]:
    return {"role": "user" if index % 2 == 0 else "assistant", "content": f"Message {index} about Lisbon."}


def thresholds_at(ledger: cl.Ledger, cid: UUID) -> list[int]:
    """How many messages were appended when each ThresholdReached was saved."""
    appended, out = 0, []
    for event in ledger.replay(cid):
        if event.kind == "MessageAppended":
            appended += 1
        elif event.kind == "ThresholdReached":
            out.append(appended)
    return out


def test_reached_fires_at_100_and_the_default_past_it(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        at = ledger.start(
            SYSTEM, policy=cl.ReductionPolicy(trigger_messages=100, keep_messages=10, trigger_when="reached")
        )
        past = ledger.start(SYSTEM, policy=cl.ReductionPolicy(trigger_messages=100, keep_messages=10))
        for index in range(101):
            ledger.append(at, chat(index))
            ledger.append(past, chat(index))
        assert thresholds_at(ledger, at) == [100]  # "when we hit 100"
        assert thresholds_at(ledger, past) == [101]  # today's default: more than 100
        for cid in (at, past):
            request = ledger.pending_summary(cid)
            assert request is not None
            # The ten newest stay: 0-89 of 100, or 0-90 of 101.
            assert (request.from_position, request.through_position) == (0, 89 if cid == at else 90)


def test_summarize_every_10_sets_the_next_trigger_at_110(shared_url: str) -> None:
    policy = cl.ReductionPolicy(
        trigger_messages=100, keep_messages=10, trigger_when="reached", summarize_every=10
    )
    summarizer = RecordingSummarizer()
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start(SYSTEM, policy=policy)
        plain = ledger.start(SYSTEM, policy=policy.model_copy(update={"summarize_every": None}))
        for index in range(130):
            for conversation in (cid, plain):
                ledger.append(conversation, chat(index))
                summarize_now(ledger, conversation, summarizer)
        assert thresholds_at(ledger, cid) == [100, 110, 120, 130]
        assert [s.through_position for s in ledger.summaries(cid)] == [89, 99, 109, 119]
        # Without it, the next trigger is 100 unsummarized messages again: at 190.
        assert thresholds_at(ledger, plain) == [100]
        assert len(ledger.context(cid)) == 1 + 1 + 10  # system prompt, summary, the ten kept
        assert summarizer.resent == []


def test_truncate_keeps_the_last_10_whole_groups_and_never_calls_a_model(shared_url: str) -> None:
    policy = cl.ReductionPolicy(strategy="truncate", trigger_messages=100, keep_messages=10)
    messages = [chat(index) for index in range(90)]
    # A tool-call group (positions 90-93) that the 10th newest message would split.
    messages.append(
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": f"c{k}", "type": "function", "function": {"name": "weather", "arguments": "{}"}}
                for k in range(3)
            ],
        }
    )
    messages += [{"role": "tool", "tool_call_id": f"c{k}", "content": f"{20 + k} C"} for k in range(3)]
    messages += [chat(index) for index in range(94, 101)]
    with cl.Ledger.open(shared_url, summarizer=RecordingSummarizer()) as ledger:
        cid = ledger.start(SYSTEM, policy=policy)
        for index, message in enumerate(messages):
            ledger.append(cid, message)
            context = ledger.context(cid)
            assert openai_context_violations(context) == []
            if index < 90:
                assert len(context) == index + 2  # nothing cut up to the trigger
        ledger.wait_idle()
        context = ledger.context(cid)
        # 101 messages are over 100: the newest ones up to 10 are kept, the group whole
        # (the 10th newest is one of its results: the cut falls after the group).
        assert context[0] == {"role": "system", "content": SYSTEM}
        assert context[1:] == messages[94:]
        assert ledger.summaries(cid) == [] and ledger.pending_summary(cid) is None
        totals = ledger.totals(cid)
        assert (totals.summaries, totals.summarizer_calls) == (0, 0)
        assert [m.message for m in ledger.transcript(cid)] == messages  # the log keeps everything
        assert "ThresholdReached" not in {e.kind for e in ledger.replay(cid)}
        # ... and it truncates again at the trigger, not before.
        for index in range(101, 190):
            ledger.append(cid, chat(index))
        assert len(ledger.context(cid)) == 1 + 7 + 89


def test_the_token_budget_preset_keeps_4000_and_summarizes_past_5000(shared_url: str) -> None:
    policy = cl.ReductionPolicy.token_budget()
    assert (policy.trigger_tokens, policy.keep_tokens) == (5000, 4000)
    summarizer = RecordingSummarizer()
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cid = ledger.start(SYSTEM, policy=policy, model="gpt-4o-mini")
        fired = []
        for index in range(60):
            before = ledger.totals(cid).context_tokens
            ledger.append(
                cid,
                {
                    "role": "user" if index % 2 == 0 else "assistant",
                    "content": " ".join(f"Lisbon{index}x{k}" for k in range(60)),
                },
            )
            after = ledger.totals(cid).context_tokens
            request = ledger.pending_summary(cid)
            if request is not None:
                fired.append((before, after))
                summarize_now(ledger, cid, summarizer)
                state = ledger.conversation(cid).state
                kept = sum(e.tokens for e in state.window)
                fixed = ledger.totals(cid).context_tokens - kept - state.summaries[0].message_tokens
                assert kept + fixed <= 4000 < kept + fixed + state.window[0].tokens + 200
        assert fired and all(before <= 5000 < after for before, after in fired)


def test_off_reduces_nothing_and_the_totals_work(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, summarizer=RecordingSummarizer()) as ledger:
        cid = ledger.start(SYSTEM, policy=cl.ReductionPolicy.off(), model="gpt-4o-mini")
        default = ledger.start(SYSTEM, model="gpt-4o-mini")
        for index in range(150):
            ledger.append(cid, chat(index))
            ledger.append(default, chat(index))
        ledger.wait_idle()
        assert ledger.conversation(cid).state.policy.max_context_tokens is None  # no cap either
        assert len(ledger.context(cid)) == 151
        assert len(ledger.context(default)) < 151  # the default policy (100/10) summarized
        totals = ledger.totals(cid)
        assert totals.messages == 150 and totals.summaries == 0
        assert totals.context_tokens == totals.full_history_tokens
        assert ledger.verify(cid).ok


def test_keep_tool_results_without_batching_keeps_exactly_n(shared_url: str) -> None:
    exact = cl.ReductionPolicy(keep_tool_results=2, tool_result_batching=False)
    batched = cl.ReductionPolicy(keep_tool_results=2)
    in_full: dict[str, list[int]] = {"exact": [], "batched": []}
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        cids = {"exact": ledger.start(SYSTEM, policy=exact), "batched": ledger.start(SYSTEM, policy=batched)}
        for turn in range(7):
            call = {
                "id": f"call{turn}",
                "type": "function",
                "function": {"name": "weather", "arguments": "{}"},
            }
            for name, cid in cids.items():
                ledger.append(cid, {"role": "user", "content": f"Weather {turn}?"})
                ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": [call]})
                ledger.append(
                    cid, {"role": "tool", "tool_call_id": f"call{turn}", "content": f"{turn} sunny"}
                )
                full = [
                    m for m in ledger.context(cid) if m["role"] == "tool" and "omitted" not in m["content"]
                ]
                in_full[name].append(len(full))
    assert in_full["exact"] == [1, 2, 2, 2, 2, 2, 2]
    assert in_full["batched"] == [1, 2, 3, 4, 2, 3, 4]  # today's batches: a stable prefix


def test_a_summary_as_the_assistants_message_is_valid_for_every_provider(shared_url: str) -> None:
    policy = cl.ReductionPolicy(trigger_messages=6, keep_messages=2, summary_placement="assistant_message")
    summarizer = RecordingSummarizer()
    with (
        cl.Ledger.open(shared_url, run_policy=False) as ledger,
        FakeAnthropicServer() as claude,
        FakeGeminiServer() as gemini_server,
    ):
        cid = ledger.start(SYSTEM, policy=policy)
        for index in range(7):
            ledger.append(cid, chat(index))
        assert summarize_now(ledger, cid, summarizer)
        context = ledger.context(cid)
        assert openai_context_violations(context) == []
        assert [m["role"] for m in context] == ["system", "assistant", "assistant", "user"]
        assert str(context[1]["content"]).startswith("Summary of the earlier conversation (messages 0-4)")
        # Anthropic and Gemini: the first turn must be the user's, so the assistant's
        # summary follows a short user turn.
        body = ledger.context(cid, format="anthropic", summary="assistant")
        assert [m["role"] for m in body["messages"]][:2] == ["user", "assistant"]
        assert body["messages"][0]["content"] == [{"type": "text", "text": "(continued)"}]
        assert body["messages"][1]["content"][0]["text"] == context[1]["content"]
        claude.script(Blocks([{"type": "text", "text": "Noted."}]))
        client = anthropic.Anthropic(base_url=claude.base_url, api_key="sk-ant-test", max_retries=0)
        reply = client.messages.create(model="claude-haiku-4-5", max_tokens=50, **body)
        assert reply.content[0].type == "text" and claude.violations == []
        request = ledger.context(cid, format="gemini", summary="assistant")
        assert [c["role"] for c in request["contents"]][:2] == ["user", "model"]
        gemini_server.script(GeminiReply("Noted."))
        gclient = genai.Client(api_key="test-key", http_options=types.HttpOptions(base_url=gemini_server.url))
        answer = gclient.models.generate_content(
            model="gemini-2.5-flash",
            contents=request["contents"],
            config={"system_instruction": request["system_instruction"]},
        )
        assert answer.text == "Noted." and gemini_server.rejected == []


def test_model_calls_count_as_hits_of_a_standing_summary_or_misses_while_one_is_due(shared_url: str) -> None:
    # The design's 100/10, reached at 100: the calls before it involve no summary, the
    # ones made while the range waits for its summary are misses, and the ones a
    # standing summary serves are hits; the token_totals read model counts the same.
    policy = cl.ReductionPolicy(trigger_messages=100, keep_messages=10, trigger_when="reached")
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        models = attach_read_models(ledger)
        cid = ledger.start(SYSTEM, policy=policy)
        for index in range(120):
            ledger.append(cid, chat(index))
            if index == 104:  # the summary lands five calls after the trigger
                assert summarize_now(ledger, cid, RecordingSummarizer())
            ledger.record_usage(cid, prompt_tokens=50, completion_tokens=5)
        totals = ledger.totals(cid)
        assert (totals.usage_records, totals.reduction_hits, totals.reduction_misses) == (120, 16, 5)
        assert ledger.wait_idle(30)
        record = models.token_totals.totals(cid)
        assert record is not None and (record.reduction_hits, record.reduction_misses) == (16, 5)
        overall = models.token_totals.global_totals()
        assert (overall.reduction_hits, overall.reduction_misses) == (16, 5)
        assert (ledger.totals().reduction_hits, ledger.totals().reduction_misses) == (16, 5)
        # Stored without the field when no summary is involved: the first call's event
        # seals as usage events did before it.
        first = next(e for e in ledger.replay(cid) if e.kind == "UsageRecorded")
        assert "reduction" not in first.data
