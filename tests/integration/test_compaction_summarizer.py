"""``OpenAICompactionSummarizer``: OpenAI's own compaction as the policy's summarizer,
through the real ``openai`` SDK against the local fake server: the policy decides
when, the provider what; its failures are classified, retried and fallen back from as
any summarizer's."""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

import contextledger as cl
from contextledger.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    anthropic_request_violations,
    responses_input_violations,
)
from contextledger.testing.compaction import ANTHROPIC_COMPACTION_BETA

POLICY = cl.ReductionPolicy(trigger_messages=8, keep_messages=2)


def _fill(ledger: cl.Ledger, turns: int) -> Any:
    cid = ledger.start("You answer about Oslo.", model="gpt-4.1-mini", policy=POLICY)
    for turn in range(turns):
        ledger.append(cid, {"role": "user", "content": f"Tell me fact {turn} about Oslo."})
        ledger.append(cid, {"role": "assistant", "content": f"Fact {turn}: Oslo has fjords and forests."})
    return cid


def test_the_policy_summarizes_with_openai_compaction_as_a_native_summary(shared_url: str) -> None:
    with FakeOpenAIServer(strict=True) as server:
        summarizer = cl.OpenAICompactionSummarizer(api_key="sk-test", base_url=server.base_url)
        with cl.Ledger.open(shared_url, summarizer=summarizer, run_policy=False) as ledger:
            cid = _fill(ledger, 5)
            request = ledger.pending_summary(cid)
            assert request is not None
            ledger.record_summary(request, summarizer.summarize(request))
            [summary] = ledger.summaries(cid)
            assert summary.native == "responses" and summary.prompt_version == "native:responses"
            assert summary.payload is not None and summary.payload[-1]["type"] == "compaction"
            assert (summary.from_position, summary.through_position) == (
                request.from_position,
                request.through_position,
            )
            compact = server.requests_to("compact")
            assert len(compact) == 1 and compact[0].body["model"] == "gpt-4.1"
            # The Responses request carries the compacted output as it came, then the rest.
            body = ledger.context(cid, format="responses")
            n = len(summary.payload)
            assert body["input"][:n] == [
                {k: v for k, v in i.items() if k != "created_by"} for i in summary.payload
            ]
            assert responses_input_violations(body["input"]) == []
            client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
            assert client.responses.create(model="gpt-4.1-mini", **body).status == "completed"
            # The other formats read the readable summary (the offline one by default).
            for other in (
                ledger.context(cid),
                ledger.context(cid, format="anthropic"),
                ledger.context(cid, format="gemini"),
            ):
                text = json.dumps(other)
                assert "encrypted_content" not in text and "[compaction]" not in text
            assert summary.text in ledger.context(cid)[1]["content"]
            assert ledger.verify(cid).ok
            # Once per crossing: the next crossing is the next call.
            for turn in range(5, 9):
                ledger.append(cid, {"role": "user", "content": f"Tell me fact {turn} about Oslo."})
                ledger.append(cid, {"role": "assistant", "content": f"Fact {turn}."})
            request = ledger.pending_summary(cid)
            assert request is not None
            ledger.record_summary(request, summarizer.summarize(request))
            assert [s.native for s in ledger.summaries(cid)] == ["responses", "responses"]
            assert len(server.requests_to("compact")) == 2


def test_a_failed_compaction_is_classified_and_native_first_falls_back_to_a_model_summary() -> None:
    with FakeOpenAIServer() as server, cl.Ledger.open("memory://", run_policy=False) as ledger:
        server.compact_status = 503
        cid = _fill(ledger, 5)
        request = ledger.pending_summary(cid)
        assert request is not None
        strict = cl.OpenAICompactionSummarizer(api_key="sk-test", base_url=server.base_url)
        with pytest.raises(cl.SummarizerUnavailableError):
            strict.summarize(request)
        native_first = cl.OpenAICompactionSummarizer(
            api_key="sk-test", base_url=server.base_url, fallback_to_summary=True
        )
        result = native_first.summarize(request)
        assert result.native is None and result.text
        ledger.record_summary(request, result)
        assert [s.native for s in ledger.summaries(cid)] == [None]
        assert "sk-test" not in repr(native_first)


def test_the_background_policy_runs_the_compaction_summarizer(sqlite_url: str) -> None:
    with FakeOpenAIServer() as server:
        summarizer = cl.OpenAICompactionSummarizer(api_key="sk-test", base_url=server.base_url)
        with cl.Ledger.open(sqlite_url, summarizer=summarizer) as ledger:
            cid = _fill(ledger, 5)
            assert ledger.wait_idle(30)
            assert [s.native for s in ledger.summaries(cid)] == ["responses"]
            assert len(server.requests_to("compact")) == 1


def test_anthropic_compaction_is_a_summarizer_too(sqlite_url: str) -> None:
    with FakeAnthropicServer() as server:
        summarizer = cl.AnthropicCompactionSummarizer(api_key="sk-ant-test", base_url=server.base_url)
        with cl.Ledger.open(sqlite_url, summarizer=summarizer, run_policy=False) as ledger:
            cid = _fill(ledger, 5)
            request = ledger.pending_summary(cid)
            assert request is not None
            result = summarizer.summarize(request)
            assert result.native == "anthropic" and result.payload is not None
            ledger.record_summary(request, result)
            [summary] = ledger.summaries(cid)
            assert summary.native == "anthropic" and summary.text == summary.payload[0]["content"]
            body = ledger.context(cid, format="anthropic")
            assert body["messages"][0]["content"][0] == summary.payload[0]
            assert anthropic_request_violations({"model": "m", "max_tokens": 5, **body}) == []
            assert summary.text in ledger.context(cid)[1]["content"]
            assert ledger.verify(cid).ok
            sent = server.requests[0]
            assert sent.header("anthropic-beta") == ANTHROPIC_COMPACTION_BETA
            assert sent.body["context_management"]["edits"][0]["pause_after_compaction"] is True
            # A failed compaction is an output error; native first falls back to a summary.
            server.compaction_summary = lambda request: None
            with pytest.raises(cl.SummarizerOutputError):
                summarizer.summarize(request)
            native_first = cl.AnthropicCompactionSummarizer(
                api_key="sk-ant-test", base_url=server.base_url, fallback_to_summary=True
            )
            assert native_first.summarize(request).native is None
