"""A fork whose source's subject another process erased, while this process held the
fork folded from before the erasure: its summarization policy summarizes the fork's
own part (its remainder), on a SQLite file and on PostgreSQL.

Two ledgers share one store, as two processes do. ``here`` runs the policy and reads
the fork ``F`` (subject ``s1``) of ``V`` (subject ``victim``) before ``there`` erases
``victim``; ``here`` keeps the victim's data key cached (``cache_seconds``), so nothing
tells it of the erasure yet. ``there`` then appends to ``F`` past the trigger. The
policy of ``here`` once summarized from its copy of ``F``, folded with the inherited
message: that summary reached back into the inherited part, so it was written under
the victim's key too, which the write fence refused. The job used to end there (as
if ``F`` were erased whole): the range stayed pending and the fork's context grew
with every turn. Then the refusal told ``here`` of the erasure, ``F`` was read again
as its remainder and its own range summarized, after a first call made from the copy
(its answer dropped: it may carry inherited text). Now the key table is read before a
range goes to the summarizer: ``here`` learns of the erasure first, and the summarizer
is asked once, for the remainder's own range. (A refusal still leads to the
remainder, when the erasure lands while the summarizer works.)
"""

from __future__ import annotations

import base64
import os

import pytest

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.testing import ScriptedSummarizer, assert_valid_openai_context

SECRET = "qx-victim-secret-5d21"
POLICY = ReductionPolicy(trigger_messages=4, keep_messages=1, max_summary_tokens=200)


def test_a_fork_s_own_range_is_summarized_after_another_process_erased_its_source(shared_url: str) -> None:
    settings = Settings(database_url=shared_url, cipher_key=base64.b64encode(os.urandom(32)).decode())
    summarizer = ScriptedSummarizer()
    with (
        Ledger.open(settings=settings, run_policy=False) as there,
        Ledger.open(settings=settings, summarizer=summarizer) as here,
    ):
        v = there.start("You help.", policy=POLICY, subject="victim")
        there.append(v, {"role": "user", "content": f"my secret is {SECRET}"})
        f = there.fork(v, subject="s1")
        there.append(f, {"role": "assistant", "content": "noted"})
        assert SECRET in str(here.context(f))  # folded here with the inherited message

        there.erase(subject="victim", reason="a request")
        for i in range(6):
            there.append(f, {"role": "user" if i % 2 else "assistant", "content": f"the fork's own {i}"})
        pending = there.pending_summary(f)
        assert pending is not None and pending.from_position == 1  # the remainder's own range

        assert here.wait_idle(30)
        assert there.pending_summary(f) is None
        summaries = there.summaries(f)
        assert [(s.from_position, s.through_position, s.valid) for s in summaries] == [
            (1, pending.through_position, True)
        ]
        assert SECRET not in str(summaries)
        # The copy from before the erasure never reaches the summarizer: the key table
        # is read first, and only the remainder's own range is asked for.
        calls = [(start, end) for c, start, end in summarizer.calls if c == f]
        assert calls == [(1, pending.through_position)], calls
        assert there.totals(f).summaries_invalidated == 0
        context = here.context(f)
        assert_valid_openai_context(context)
        assert SECRET not in str(context)
        assert context[0]["content"].startswith("Summary of the earlier conversation")
        assert here.verify(f).ok


def test_a_command_on_a_fork_held_from_before_its_source_s_erasure_reads_the_remainder_first(
    shared_url: str,
) -> None:
    """Once ``here`` knows of the erasure (a write of its own was refused), a command on
    ``F`` reads it again as its remainder before it runs, as a read does: appending
    past the trigger on the copy from before pinned a range from the inherited message,
    which every reader drops with the inherited part, so the crossing was lost (nothing
    pending, nothing summarized)."""
    settings = Settings(
        database_url=shared_url, cipher_key=base64.b64encode(os.urandom(32)).decode(), run_policy=False
    )
    with Ledger.open(settings=settings) as there, Ledger.open(settings=settings) as here:
        v = there.start("You help.", policy=POLICY, subject="victim")
        there.append(v, {"role": "user", "content": f"my secret is {SECRET}"})
        f = there.fork(v, subject="s1")
        there.append(f, {"role": "assistant", "content": "noted"})
        assert SECRET in str(here.context(f))

        there.erase(subject="victim", reason="a request")
        with pytest.raises(cl.ConversationErasedError):
            here.append(v, {"role": "assistant", "content": "too late"})
        for i in range(6):
            here.append(f, {"role": "user" if i % 2 else "assistant", "content": f"the fork's own {i}"})

        for ledger in (here, there):
            pending = ledger.pending_summary(f)
            assert pending is not None and (pending.from_position, pending.through_position) == (1, 4)
            assert SECRET not in str(ledger.context(f))
