"""A provider's own compaction is a summary: Anthropic's compaction blocks and OpenAI's
opaque compaction items, made by the fake servers for the real SDKs, recorded as
native summaries (nothing retracted, the transcript whole), sent back to their own
provider as they came and as readable text to every other format."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

import contextledger as cl
from contextledger.testing import (
    FakeAnthropicServer,
    FakeOpenAIServer,
    Reply,
    ScriptedSummarizer,
    anthropic_request_violations,
    gemini_request_violations,
    openai_context_violations,
    responses_input_violations,
)
from contextledger.testing.compaction import ANTHROPIC_COMPACTION_BETA

CLAUDE = "claude-haiku-4-5"
MANAGE: Any = {"edits": [{"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 400}}]}


def _claude(server: FakeAnthropicServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.base_url, api_key="sk-ant-test", max_retries=0)


def _anthropic_turn(ledger: cl.Ledger, client: anthropic.Anthropic, cid: Any, turn: int) -> None:
    ledger.append(cid, {"role": "user", "content": f"Tell me fact {turn} about Oslo, with the details."})
    reply = client.beta.messages.create(
        model=CLAUDE,
        max_tokens=200,
        betas=[ANTHROPIC_COMPACTION_BETA],
        context_management=MANAGE,
        **ledger.context(cid, format="anthropic"),
    )
    ledger.append(cid, reply)


def _no_compaction_block(body: Any) -> bool:
    text = json.dumps(body)
    return '"compaction"' not in text and "[compaction]" not in text


def test_an_anthropic_loop_with_server_compaction_records_native_summaries(shared_url: str) -> None:
    with FakeAnthropicServer() as server, cl.Ledger.open(shared_url, run_policy=False) as ledger:
        server.default = Reply("Oslo has fjords, museums and long summer days.")
        client = _claude(server)
        cid = ledger.start("You answer about Oslo.", model=CLAUDE)
        for turn in range(100):
            _anthropic_turn(ledger, client, cid, turn)
        assert server.violations == [] and server.compactions > 3
        summaries = ledger.summaries(cid)
        assert len(summaries) == server.compactions
        assert {s.native for s in summaries} == {"anthropic"} and all(s.valid for s in summaries)
        latest = summaries[-1]
        assert latest.payload is not None and latest.text == latest.payload[0]["content"]
        assert latest.prompt_version == "native:anthropic" and latest.model == CLAUDE
        # Anthropic's request starts from the latest compaction block, as the API expects.
        body = ledger.context(cid, format="anthropic")
        assert body["messages"][0]["role"] == "assistant"
        assert body["messages"][0]["content"][0] == latest.payload[0]
        assert anthropic_request_violations({"model": CLAUDE, "max_tokens": 5, **body}) == []
        # Every other format carries the summary text, never a compaction block.
        chat = ledger.context(cid)
        gemini = ledger.context(cid, format="gemini")
        assert any(latest.text in str(m.get("content")) for m in chat)
        assert latest.text in json.dumps(gemini)
        assert _no_compaction_block(chat) and _no_compaction_block(gemini)
        assert openai_context_violations(chat) == []
        assert (
            gemini_request_violations(gemini["contents"], system_instruction=gemini["system_instruction"])
            == []
        )
        # Nothing retracted; every message in the transcript; the digests hold.
        assert ledger.totals(cid).retracted_messages == 0
        assert len(ledger.transcript(cid)) == 200
        assert ledger.verify(cid).problems == ()


def test_a_failed_anthropic_compaction_is_a_failed_attempt_and_the_policy_takes_over() -> None:
    policy = cl.ReductionPolicy(trigger_messages=4, keep_messages=2)
    with (
        FakeAnthropicServer() as server,
        cl.Ledger.open("memory://", summarizer=ScriptedSummarizer(), run_policy=False) as ledger,
    ):
        server.compaction_summary = lambda request: None
        client = _claude(server)
        cid = ledger.start("You answer about Oslo.", model=CLAUDE, policy=policy)
        for turn in range(30):
            _anthropic_turn(ledger, client, cid, turn)
        assert server.compactions > 0
        assert ledger.summaries(cid) == []
        totals = ledger.totals(cid)
        assert totals.summarizer_failures == server.compactions
        # The null block is dropped: the reply's own text is what was appended.
        assert all("compaction" not in json.dumps(e.message) for e in ledger.transcript(cid))
        request = ledger.pending_summary(cid)
        assert request is not None and request.attempt == 1  # the native failure is not its attempt
        ledger.record_summary(request, ledger.summarizer.summarize(request))
        assert [s.native for s in ledger.summaries(cid)] == [None]


def _responses_loop(
    ledger: cl.Ledger, server: FakeOpenAIServer, cid: Any, turns: int
) -> list[tuple[int, Any]]:
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    sent = []
    for turn in range(turns):
        ledger.append(cid, {"type": "message", "role": "user", "content": f"Tell me fact {turn} about Oslo."})
        memory = ledger.working_memory(cid)
        ctx = ledger.context(cid, version=memory.version, format="responses")
        reply = client.responses.create(
            model="gpt-4.1-mini", context_management=[{"type": "compaction", "compact_threshold": 300}], **ctx
        )
        sent.append((memory.version, ctx))
        ledger.append(cid, reply)
    return sent


def test_an_openai_compaction_is_sent_back_as_it_came_and_read_elsewhere_as_a_readable_summary(
    shared_url: str,
) -> None:
    with (
        FakeOpenAIServer(strict=True) as server,
        cl.Ledger.open(shared_url, summarizer=ScriptedSummarizer(), run_policy=False) as ledger,
    ):
        server.default = Reply("Oslo sits at the head of the Oslofjord.")
        cid = ledger.start("You answer about Oslo.", model="gpt-4.1-mini")
        sent = _responses_loop(ledger, server, cid, 30)
        assert server.violations == [] and server.compactions.issued > 1
        for request, (version, ctx) in zip(server.requests_to("responses"), sent, strict=True):
            assert {k: request.body[k] for k in ("instructions", "input")} == ctx
            assert ledger.context(cid, version=version, format="responses") == ctx
        summaries = ledger.summaries(cid)
        assert len(summaries) == server.compactions.issued
        assert {s.native for s in summaries} == {"responses"}
        latest = summaries[-1]
        assert latest.payload is not None and latest.payload[0]["type"] == "compaction"
        opaque = latest.payload[0]["encrypted_content"]
        # Its own provider gets the opaque item in place of the range it covers.
        items = ledger.context(cid, format="responses")["input"]
        assert items[0] == latest.payload[0] and responses_input_violations(items) == []
        # Every other format: the conversation's summarizer's summary of the same range.
        assert latest.text.startswith("Summary") and "gAAAAB" not in latest.text
        for body in (
            ledger.context(cid),
            ledger.context(cid, format="anthropic"),
            ledger.context(cid, format="gemini"),
        ):
            text = json.dumps(body)
            assert latest.text in text.replace('\\"', '"') or json.dumps(latest.text)[1:-1] in text
            assert opaque not in text and "[compaction]" not in text and "encrypted_content" not in text
        assert ledger.totals(cid).retracted_messages == 0
        assert len(ledger.transcript(cid)) == 60
        assert all("compaction" not in json.dumps(e.message) for e in ledger.transcript(cid))
        assert ledger.verify(cid).problems == ()


def test_an_edit_of_a_covered_message_invalidates_the_native_summary() -> None:
    with FakeOpenAIServer() as server, cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s", model="gpt-4.1-mini")
        _responses_loop(ledger, server, cid, 20)
        first = ledger.summaries(cid)[0]
        assert first.native == "responses"
        ledger.edit(cid, first.from_position, {"role": "user", "content": "Tell me about Bergen instead."})
        after = ledger.summaries(cid)
        assert after[0].valid is False
        assert all(first.payload != s.payload for s in after if s.valid)
        assert "Bergen" in json.dumps(ledger.context(cid, format="responses"))


def _key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def test_erasing_the_subject_makes_the_native_payloads_unreadable(tmp_path: Path) -> None:
    payloads: list[str] = []
    for cipher, folder in ((None, tmp_path / "clear"), (_key(), tmp_path / "sealed")):
        folder.mkdir()
        # The control store keeps its records in clear (key_scope="store", no master key).
        scope = "store" if cipher is None else "subject"
        settings = cl.Settings(
            database_url=f"sqlite:///{folder / 'ledger.db'}", cipher_key=cipher, key_scope=scope
        )
        with FakeOpenAIServer() as server, cl.Ledger.open(settings=settings, run_policy=False) as ledger:
            subject = {} if cipher is None else {"subject": "subject-a"}
            cid = ledger.start("s", model="gpt-4.1-mini", **subject)
            _responses_loop(ledger, server, cid, 20)
            payload = next(s.payload for s in ledger.summaries(cid) if s.payload)
            assert payload is not None
            payloads.append(payload[0]["encrypted_content"])
            if cipher is not None:
                ledger.erase("subject-a", "the subject asked")
                with pytest.raises(cl.ConversationErasedError):
                    ledger.summaries(cid)
        for db in folder.glob("*.db"):
            with sqlite3.connect(db) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    clear = b"".join(p.read_bytes() for p in (tmp_path / "clear").iterdir())
    sealed = b"".join(p.read_bytes() for p in (tmp_path / "sealed").iterdir())
    assert payloads[0].encode() in clear  # the scan finds a payload stored in the clear
    assert payloads[1].encode() not in sealed


def test_a_compaction_item_appended_on_its_own_is_a_native_summary_and_append_gives_the_newest_position() -> (
    None
):
    with FakeOpenAIServer() as server, cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("s", model="gpt-4.1")
        for n in range(3):
            ledger.append(cid, {"role": "user", "content": f"question {n}"})
            ledger.append(cid, {"role": "assistant", "content": f"answer {n}"})
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        compacted = client.responses.compact(model="gpt-4.1", **ledger.context(cid, format="responses"))
        assert ledger.append(cid, compacted.output[-1]) == 5  # the newest message it covers
        [summary] = ledger.summaries(cid)
        assert (summary.native, summary.from_position, summary.through_position) == ("responses", 0, 5)
        assert len(ledger.transcript(cid)) == 6
        # Nothing new to cover: appended again, it records nothing.
        assert ledger.append(cid, compacted.output[-1]) == 5
        assert len(ledger.summaries(cid)) == 1
