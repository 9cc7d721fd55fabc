"""A fork of another data subject keeps what is its own after its source's subject is
erased (``domain/remainder.py``), on a real SQLite file and on PostgreSQL.

Source ``S`` (subject ``s``) has messages, a summary and an open tool call; ``F =
fork(S, subject="x")`` answers that call, sets its own system prompt and policy,
appends messages and tool calls, and summarizes a window reaching into the inherited
part. Erasing ``s`` leaves ``F`` its own messages only: a valid OpenAI context without
``S``'s marker, its transcript, totals, summaries, replay and ``verify`` as
``docs/privacy.md`` says; the policy summarizes ``F``'s own messages again. Erasing
``x`` then erases ``F`` whole.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.testing import assert_valid_openai_context

MARK_S = "qx-source-s-marker-71c4"
MARK_X = "qx-fork-x-marker-0be9"
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)
FORK_POLICY = ReductionPolicy(trigger_messages=5, keep_messages=2, max_summary_tokens=200)


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


def call(call_id: str, marker: str) -> dict[str, Any]:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": "lookup", "arguments": f'{{"q": "{marker}"}}'},
    }


def build(ledger: Ledger) -> tuple[UUID, UUID]:
    """``S`` and its fork ``F`` (module doc); returns (s, f)."""
    s = ledger.start(f"You are the {MARK_S} assistant.", policy=POLICY, subject="subject-s")
    for i in range(4):
        ledger.append(s, {"role": "user", "content": f"question {i} about {MARK_S}"})
        ledger.append(s, {"role": "assistant", "content": f"answer {i}: {MARK_S}"})
    ledger.append(s, {"role": "user", "content": f"look it up: {MARK_S}"})
    ledger.append(s, {"role": "assistant", "content": None, "tool_calls": [call("call_s", MARK_S)]})
    assert ledger.wait_idle(60)
    assert any(MARK_S in info.text for info in ledger.summaries(s))

    f = ledger.fork(s, subject="subject-x")
    # Answers the call made in the inherited part.
    ledger.append(f, {"role": "tool", "tool_call_id": "call_s", "content": f"found {MARK_X}"})
    ledger.change_system_prompt(f, f"You are the {MARK_X} assistant.")
    for i in range(3):
        ledger.append(f, {"role": "user", "content": f"the fork's own {i} {MARK_X}"})
        ledger.append(f, {"role": "assistant", "content": None, "tool_calls": [call(f"call_x{i}", MARK_X)]})
        ledger.append(f, {"role": "tool", "tool_call_id": f"call_x{i}", "content": f"result {i} {MARK_X}"})
        ledger.append(f, {"role": "assistant", "content": f"the fork's answer {i} {MARK_X}"})
    assert ledger.wait_idle(60)
    ledger.change_policy(f, FORK_POLICY)
    assert ledger.wait_idle(60)
    inherited = {info.text for info in ledger.summaries(s)}
    made = [info.text for info in ledger.summaries(f) if info.text not in inherited]
    # A summary of the fork reaching into the inherited part (the offline summarizer copies text).
    assert any(MARK_S in text and MARK_X in text for text in made), made
    return s, f


def fork_keeps_its_own(settings: Settings) -> None:
    with Ledger.open(settings=settings) as ledger:
        s, f = build(ledger)
        before = ledger.transcript(f)
        inherited = [e for e in before if e.inherited_from is not None]
        own_positions = {e.position for e in before if e.inherited_from is None}
        assert inherited and MARK_S in str(ledger.summaries(f))  # the checks below can fail
        erased_before = min(own_positions)

        report = ledger.erase(subject="subject-s", reason="erasure request 9")
        assert report.conversations == (s,)
        assert ledger.wait_idle(60)

        for read in (ledger.context, ledger.transcript, ledger.totals, ledger.summaries):
            with pytest.raises(cl.ConversationErasedError):
                read(s)

        context = ledger.context(f)
        assert_valid_openai_context(context)
        assert MARK_S not in str(context)
        assert context[0] == {"role": "system", "content": f"You are the {MARK_X} assistant."}
        assert all(m.get("tool_call_id") != "call_s" for m in context)  # no orphan result
        assert any(MARK_X in str(m.get("content")) for m in context if m["role"] == "user")

        transcript = ledger.transcript(f)
        assert MARK_S not in str(transcript)
        assert transcript and all(e.inherited_from is None for e in transcript)
        # The result answering the inherited call went with the call.
        assert {e.position for e in transcript} == own_positions - {erased_before}

        totals = ledger.totals(f)
        assert totals.messages == len(own_positions)
        assert totals.summaries_invalidated >= 1
        assert totals.context_tokens > 0
        assert MARK_S not in str(ledger.working_memory(f))
        assert MARK_S not in str(ledger.summaries(f))

        replay = list(ledger.replay(f))
        assert replay[0].kind == "Erased" and replay[0].version == 1
        assert [e.version for e in replay] == list(range(1, len(replay) + 1))
        assert any(e.kind == "Erased" and e.topic.endswith("SummaryCreated") for e in replay)
        assert MARK_S not in str([e.record() for e in replay])

        verified = ledger.verify()
        assert verified.ok, verified.problems
        assert s in verified.erased and f not in verified.erased
        assert verified.partly_erased == (f,)
        notes = [p.problem for p in verified.unverified if p.conversation_id == f]
        # The erasure recorded the inherited digest: the fork's chain verifies across it.
        assert not any(n.startswith("not verifiable past the erasure") for n in notes), notes
        assert s in verified.erased_checked
        assert ledger.verify(f).partly_erased == (f,)

        # The summarization policy summarizes what remains when its thresholds say so.
        ledger.append(f, {"role": "user", "content": f"one more {MARK_X}"})
        assert ledger.wait_idle(60)
        remade = ledger.summaries(f)
        assert any(info.valid and MARK_X in info.text for info in remade), remade
        assert MARK_S not in str(remade)
        context = ledger.context(f)
        assert_valid_openai_context(context)
        assert MARK_S not in str(context)
        assert ledger.verify().ok

        # Another process reads the same remainder.
        with Ledger.open(settings=settings.model_copy(update={"run_policy": False})) as other:
            assert other.context(f) == context

        # Forking it is refused, and leaves nothing behind (not even a subject's row).
        ids = ledger.conversation_ids()
        with pytest.raises(cl.ConversationErasedError) as caught:
            ledger.fork(f, subject="subject-z")
        assert caught.value.subject == "subject-s" and caught.value.reason == "erasure request 9"
        assert ledger.conversation_ids() == ids and ledger.mapper.keys.conversations_of("subject-z") == []
        # Editing a message the fork inherited is refused: nothing is left of it.
        with pytest.raises(cl.UnknownPositionError):
            ledger.edit(f, 0, {"role": "user", "content": "rewritten"})

        ledger.erase(subject="subject-x", reason="erasure request 10")
        for read in (ledger.context, ledger.transcript, ledger.totals, ledger.summaries):
            with pytest.raises(cl.ConversationErasedError):
                read(f)
        with pytest.raises(cl.ConversationErasedError):
            list(ledger.replay(f))
        verified = ledger.verify()
        assert verified.ok and set(verified.erased) == {s, f} and not verified.partly_erased


def test_a_fork_keeps_its_own_on_a_sqlite_file(tmp_path: Path) -> None:
    fork_keeps_its_own(
        Settings(
            database_url=f"sqlite:///{tmp_path / 'ledger.db'}",
            poll_interval=0.02,
            snapshot_interval=4,
            cipher_key=key(),
        )
    )


@pytest.mark.postgres
def test_a_fork_keeps_its_own_on_postgres(postgres_url: str) -> None:
    fork_keeps_its_own(
        Settings(database_url=postgres_url, poll_interval=0.02, snapshot_interval=4, cipher_key=key())
    )
