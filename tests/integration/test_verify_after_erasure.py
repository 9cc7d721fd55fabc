"""Verify after an erasure, on a SQLite file and on PostgreSQL: an erased conversation
is reported erased with its structure checked (its records against what its erasure
recorded, their order, times, positions and summaries' ranges, the digest chain over
their commitments), a fork of another subject verifies across its source's erasure
(its chain goes on from the recorded inherited digest), and an erased conversation's
stored structure altered in any way (``tests/support/erased_tamper.py``) is found."""

from __future__ import annotations

import uuid
from uuid import UUID

import pytest

import contextledger as cl
from tests.support.erased_tamper import TAMPERS, tamper
from tests.support.fork_steps import run_step
from tests.support.raw_store import RawStore

POLICY = cl.ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)


def erased_source_and_fork(ledger: cl.Ledger, tag: str) -> tuple[UUID, UUID]:
    """A source of subject ``s-tag`` with edits, a retraction, a new system prompt and
    summaries, forked to subject ``x-tag``; then ``s-tag`` erased."""
    s = ledger.start("the source's prompt", policy=POLICY, subject=f"s-{tag}")
    for n, step in enumerate(["user", "assistant", "tools", "user", "assistant", "summarize", "user"]):
        run_step(ledger, s, step, "source", n)
    ledger.edit(s, 0, {"role": "user", "content": "source user 0, edited"})
    ledger.change_system_prompt(s, "the source's new prompt")
    run_step(ledger, s, "retract", "source", 9)
    run_step(ledger, s, "summarize", "source", 10)
    f = ledger.fork(s, subject=f"x-{tag}")
    for n, step in enumerate(["user", "assistant", "user", "assistant"]):
        run_step(ledger, f, step, "fork", n)
    assert ledger.verify().ok and ledger.summaries(s)
    ledger.erase(subject=f"s-{tag}", reason="verify after erasure")
    return s, f


def test_an_erased_conversation_is_checked_and_a_fork_verifies_across_it(shared_url: str) -> None:
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        s, f = erased_source_and_fork(ledger, uuid.uuid4().hex[:8])
        report = ledger.verify()
        assert report.ok, report.problems
        assert s in report.erased and s in report.erased_checked
        assert report.partly_erased == (f,) and f not in report.erased
        notes = [p.problem for p in report.unverified if p.conversation_id == f]
        assert not any(n.startswith("not verifiable past the erasure") for n in notes), notes
        assert ledger.verify(f).ok and ledger.verify(s).erased_checked == (s,)
        ledger.append(f, {"role": "user", "content": "after the erasure"})
        assert ledger.verify().ok


@pytest.mark.parametrize("how", TAMPERS)
def test_an_erased_conversations_stored_structure_altered_is_found(shared_url: str, how: str) -> None:
    tag = uuid.uuid4().hex[:8]
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        s, f = erased_source_and_fork(ledger, tag)
    assert tamper(RawStore(shared_url), f"s-{tag}", s, how)
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        report = ledger.verify()
        assert not report.ok
        assert {p.conversation_id for p in report.problems} <= {s, f}, report.problems
        assert s in {p.conversation_id for p in report.problems}, report.problems


def test_a_forks_recorded_inherited_digest_altered_is_found(shared_url: str) -> None:
    tag = uuid.uuid4().hex[:8]
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        _, f = erased_source_and_fork(ledger, tag)
    raw = RawStore(shared_url)
    assert tamper_fork_digest(raw, f"s-{tag}", f)
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        problems = ledger.verify().problems
        assert [p.conversation_id for p in problems] and {p.conversation_id for p in problems} == {f}
        assert any("inherited digest is not its source's" in p.problem for p in problems), problems


def tamper_fork_digest(raw: RawStore, subject: str, fork: UUID) -> bool:
    """Change the inherited digest the erasure recorded of ``fork``'s first record."""
    import json

    from contextledger.domain.erasure import Erasure
    from tests.support.erased_tamper import CLEAR_MARK

    record_id = Erasure.id_for(subject)
    [(version, _, state)] = raw.rows("events", record_id)
    data = json.loads(state[len(CLEAR_MARK) :])
    [log] = [log for log in data["structure"] if log["conversation_id"] == str(fork)]
    first = log["records"][0]
    if not first.get("digest"):
        return False
    first["digest"] = ("0" if first["digest"][0] != "0" else "1") + first["digest"][1:]
    raw.set_state("events", record_id, version, CLEAR_MARK + json.dumps(data).encode())
    return True
