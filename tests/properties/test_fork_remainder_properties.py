"""What is left of a fork after its source's subject is erased: for any source (turns,
tool-call groups, possibly an open call at the fork) and any fork of another subject
(answers to the open call, turns, tool-call groups, retractions, summaries reaching
into the inherited part), erasing the source's subject leaves the fork a context the
OpenAI API accepts, made of the fork's own messages only (never the source's), its
transcript and totals the same, ``verify`` clean; and so after the fork goes on and is
summarized again."""

from __future__ import annotations

import base64
import json
import os
from uuid import UUID

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.testing import assert_valid_openai_context
from tests.support.fork_steps import run_step

SOURCE = "src-marker"
POLICY = cl.ReductionPolicy(trigger_messages=4, keep_messages=2, max_summary_tokens=200)

#: One step: a user turn, an assistant turn, a tool-call group (its results answered)
#: or one left open (only as a source's last step), a retraction of the newest group,
#: a summary of what is pending.
steps = st.sampled_from(["user", "assistant", "tools", "retract", "summarize"])


run = run_step


def check(ledger: cl.Ledger, fork: UUID, prompt: str) -> None:
    context = ledger.context(fork)
    assert_valid_openai_context(context)
    assert SOURCE not in json.dumps(context)
    assert context[0] == {"role": "system", "content": prompt}
    transcript = ledger.transcript(fork)
    assert SOURCE not in str(transcript)
    assert ledger.totals(fork).messages >= len({e.position for e in transcript})
    verified = ledger.verify(fork)
    assert verified.ok, verified.problems
    assert verified.partly_erased == (fork,)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=st.lists(steps, min_size=1, max_size=8),
    open_call=st.booleans(),
    before=st.lists(steps, max_size=8),
    after=st.lists(steps, max_size=5),
)
def test_a_fork_keeps_only_its_own_after_its_source_is_erased(
    source: list[str], open_call: bool, before: list[str], after: list[str]
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    ledger = cl.Ledger(cl.Settings(database_url="memory://", cipher_key=key, run_policy=False))
    try:
        s = ledger.start(f"{SOURCE} prompt", policy=POLICY, subject="subject-s")
        run(ledger, s, "user", SOURCE, -1)
        for n, step in enumerate(source):
            run(ledger, s, step, SOURCE, n)
        if open_call:
            run(ledger, s, "open", SOURCE, len(source))
        fork = ledger.fork(s, subject="subject-x")
        for call_id in ledger.conversation(fork).state.open_calls:
            ledger.append(fork, {"role": "tool", "tool_call_id": call_id, "content": "fork result"})
        prompt = "the fork's own prompt"
        ledger.change_system_prompt(fork, prompt)
        for n, step in enumerate(before):
            run(ledger, fork, step, "fork", n)
        assert SOURCE in json.dumps(ledger.transcript(fork), default=str)  # the checks can fail
        ledger.erase(subject="subject-s", reason="property")
        check(ledger, fork, prompt)
        for n, step in enumerate(after):
            run(ledger, fork, step, "later", n)
        check(ledger, fork, prompt)
    finally:
        ledger.close()
