"""Erase-then-use for forks whose source's subject is erased, on a SQLite file and on
PostgreSQL: for any source, any fork of another subject (turns, tool-call groups,
edits of its own or inherited messages, retractions, summaries, a summary request
taken before the erasure), erasing the source's subject leaves ``transcript``,
``context``, ``working_memory``, ``summaries``, ``totals`` and ``record_summary``
working on the remainder (or refusing with a typed error), and the policy the fork
ran under summarizes the remainder again when its thresholds say so."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import uuid
from typing import Any
from uuid import UUID

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.shared.ports import SummaryResult
from contextledger.application.summaries.summarization import summarize_pending
from contextledger.testing import assert_valid_openai_context
from tests.support.fork_steps import run_step

SOURCE = "src-marker"
#: One master key for every example (the examples of one run share the store).
KEY = base64.b64encode(os.urandom(32)).decode()
POLICY = cl.ReductionPolicy(trigger_messages=6, keep_messages=2, max_summary_tokens=200)

steps = st.sampled_from(["user", "assistant", "tools", "retract", "edit", "summarize", "record"])


def run(ledger: cl.Ledger, cid: UUID, step: str, marker: str, n: int) -> None:
    if step == "edit":
        live = [e for e in ledger.transcript(cid) if not e.retracted and e.superseded_by_version is None]
        if live:
            entry = live[n % len(live)]
            if entry.message["role"] in ("user", "assistant") and not entry.message.get("tool_calls"):
                replacement = {"role": entry.message["role"], "content": f"{marker} edited {n}"}
                with contextlib.suppress(cl.UnknownPositionError, cl.InvalidEditError):
                    ledger.edit(cid, entry.position, replacement)
    elif step == "record":
        request = ledger.pending_summary(cid)
        if request is not None:
            record(ledger, request, marker)
    else:
        run_step(ledger, cid, step, marker, n)


def record(ledger: cl.Ledger, request: Any, marker: str) -> None:
    """Record a summary for ``request`` (a stale one is refused with a typed error)."""
    result = SummaryResult(text=f"{marker} summary", model="scripted", prompt_version="p1")
    with contextlib.suppress(cl.StaleSummaryError, cl.SummaryQualityError):
        ledger.record_summary(request, result)


def check(ledger: cl.Ledger, fork: UUID) -> bool:
    """The fork's reads, as docs/privacy.md says; False: nothing of the fork's own was
    readable, and every read says it was erased."""
    try:
        context = ledger.context(fork)
    except cl.ConversationErasedError:
        for read in (ledger.transcript, ledger.summaries, ledger.totals, ledger.working_memory):
            with pytest.raises(cl.ConversationErasedError):
                read(fork)
        return False
    assert_valid_openai_context(context)
    assert SOURCE not in json.dumps(context)
    transcript = ledger.transcript(fork)
    assert SOURCE not in str(transcript)
    assert all(e.inherited_from is None for e in transcript)
    assert SOURCE not in str(ledger.summaries(fork))
    assert SOURCE not in str(ledger.working_memory(fork))
    totals = ledger.totals(fork)
    assert totals.messages >= len({e.position for e in transcript if not e.retracted})
    assert ledger.verify(fork).ok
    return True


def summarize_all(ledger: cl.Ledger, fork: UUID) -> None:
    """Summarize what is pending until nothing is (bounded)."""
    for _ in range(20):
        if ledger.pending_summary(fork) is None:
            return
        summarize_pending(ledger, ledger.summarizer, fork, backoff=lambda attempt: 0.0)
    raise AssertionError("the policy keeps asking for summaries")


def erase_then_use(url: str, source: list[str], before: list[str], after: list[str], hold: bool) -> None:
    tag = uuid.uuid4().hex[:8]
    settings_ = cl.Settings(database_url=url, cipher_key=KEY, run_policy=False, snapshot_interval=5)
    with cl.Ledger.open(settings=settings_) as ledger:
        s = ledger.start(f"{SOURCE} prompt", policy=POLICY, subject=f"s-{tag}")
        run(ledger, s, "user", SOURCE, -1)
        for n, step in enumerate(source):
            run(ledger, s, step, SOURCE, n)
        fork = ledger.fork(s, subject=f"x-{tag}")
        for call_id in ledger.conversation(fork).state.open_calls:
            ledger.append(fork, {"role": "tool", "tool_call_id": call_id, "content": "fork result"})
        for n, step in enumerate(before):
            run(ledger, fork, step, "fork", n)
        held = ledger.pending_summary(fork) if hold else None
        ledger.erase(subject=f"s-{tag}", reason="property")
        if not check(ledger, fork):
            return
        if held is not None:  # a request taken before the erasure, recorded after it
            record(ledger, held, "held")
            check(ledger, fork)
        for n, step in enumerate(after):
            run(ledger, fork, step, "later", n)
        check(ledger, fork)
        # The policy the fork ran under still holds: the remainder is summarized again.
        for n in range(POLICY.trigger_messages + 2):
            run(ledger, fork, "user" if n % 2 == 0 else "assistant", "again", n)
        assert ledger.pending_summary(fork) is not None
        summarize_all(ledger, fork)
        context = ledger.context(fork)
        assert_valid_openai_context(context)
        assert len([m for m in context if m["role"] != "system"]) <= POLICY.trigger_messages + 3
        check(ledger, fork)


@pytest.mark.postgres
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@example(  # a request held across the erasure extends the fork's erased summary
    source=["user", "user", "user"], before=["tools", "tools", "summarize", "user"], after=[], hold=True
)
@given(
    source=st.lists(steps, min_size=1, max_size=6),
    before=st.lists(steps, max_size=6),
    after=st.lists(steps, max_size=4),
    hold=st.booleans(),
)
def test_a_fork_of_an_erased_source_keeps_working(
    shared_url: str, source: list[str], before: list[str], after: list[str], hold: bool
) -> None:
    erase_then_use(shared_url, source, before, after, hold)
