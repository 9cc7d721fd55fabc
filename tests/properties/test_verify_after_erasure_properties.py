"""Verify after an erasure, as a property, on a SQLite file and on PostgreSQL: for any
conversations of two subjects (turns, tool-call groups, edits, retractions, system
prompt changes, summaries) and forks between them, erasing one subject leaves every
conversation verifying OK, those erased whole reported erased with their structure
checked, the forks of the other subject verified across the erasure; and any
alteration of an erased conversation's stored structure (a record dropped or moved,
a commitment, a time, a link or a summary's range changed) is found."""

from __future__ import annotations

import contextlib
import uuid
from uuid import UUID

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

import contextledger as cl
from tests.support.erased_tamper import TAMPERS, tamper
from tests.support.fork_steps import run_step
from tests.support.raw_store import RawStore

POLICY = cl.ReductionPolicy(trigger_messages=4, keep_messages=2, max_summary_tokens=200)

steps = st.sampled_from(["user", "assistant", "tools", "retract", "edit", "prompt", "summarize"])
#: A conversation: whose it is (0, the subject erased, or 1), what it was forked from
#: (an earlier one, or None), and its steps. The first is subject 0's, started.
conversation = st.tuples(
    st.integers(0, 1), st.one_of(st.none(), st.integers(0, 3)), st.lists(steps, max_size=10)
)
conversations = st.builds(
    lambda first, rest: [(0, None, first), *rest],
    st.lists(steps, min_size=2, max_size=10),
    st.lists(conversation, max_size=3),
)


def run(ledger: cl.Ledger, cid: UUID, step: str, n: int) -> None:
    if step == "edit":
        live = [e for e in ledger.transcript(cid) if not e.retracted and e.superseded_by_version is None]
        plain = [
            e for e in live if e.message["role"] in ("user", "assistant") and not e.message.get("tool_calls")
        ]
        if plain:
            entry = plain[n % len(plain)]
            with contextlib.suppress(cl.UnknownPositionError, cl.InvalidEditError):
                ledger.edit(cid, entry.position, {"role": entry.message["role"], "content": f"edited {n}"})
    elif step == "prompt":
        ledger.change_system_prompt(cid, f"prompt {n}")
    else:
        run_step(ledger, cid, step, "text", n)


def build(
    ledger: cl.Ledger, tag: str, plan: list[tuple[int, int | None, list[str]]]
) -> list[tuple[UUID, int]]:
    """The conversations of ``plan``, each with its subject (0 or 1)."""
    made: list[tuple[UUID, int]] = []
    for whose, source, plan_steps in plan:
        subject = f"p{whose}-{tag}"
        if source is not None and source < len(made):
            cid = ledger.fork(made[source][0], subject=subject)
            for call_id in ledger.conversation(cid).state.open_calls:
                ledger.append(cid, {"role": "tool", "tool_call_id": call_id, "content": "result"})
        else:
            cid = ledger.start("a prompt", policy=POLICY, subject=subject)
        run(ledger, cid, "user", -1)
        for n, step in enumerate(plan_steps):
            run(ledger, cid, step, n)
        made.append((cid, whose))
    return made


@pytest.mark.postgres
@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(plan=conversations, how=st.sampled_from(TAMPERS))
# A fork (subject 0's) of a fork (subject 1's) that edited a message it inherited from
# subject 0: the edit's record is readable, but not part of the source's own remainder.
@example(plan=[(0, None, ["user", "user"]), (0, None, []), (1, 0, ["edit"]), (0, 2, [])], how="drop")
def test_verify_after_an_erasure(
    shared_url: str, plan: list[tuple[int, int | None, list[str]]], how: str
) -> None:
    tag = uuid.uuid4().hex[:8]
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        made = build(ledger, tag, plan)
        # The store is shared by the examples (and altered by earlier ones): this
        # example's conversations are verified one by one.
        assert all(ledger.verify(cid).ok for cid, _ in made)
        ledger.erase(subject=f"p0-{tag}", reason="property", force=True)  # it may name none
        for cid, whose in made:
            report = ledger.verify(cid)
            assert report.ok, report.problems
            if whose == 0:  # erased whole, its structure checked
                assert report.erased == (cid,) and report.erased_checked == (cid,)
            elif report.partly_erased:  # a fork of the erased subject's: across it
                event("a fork verified across its source's erasure")
                notes = [p.problem for p in report.unverified]
                assert not any(n.startswith("not verifiable past the erasure") for n in notes), notes
            else:
                assert not report.erased
    target = made[0][0]  # subject 0's first conversation, started (not forked)
    if not tamper(RawStore(shared_url), f"p0-{tag}", target, how):
        return  # nothing to alter that way (no summary, too few records)
    event(f"altered: {how}")
    with cl.Ledger.open(shared_url, run_policy=False) as ledger:
        found = ledger.verify(target)
        assert not found.ok, how
