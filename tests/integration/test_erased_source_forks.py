"""Forks of another data subject after their source's subject is erased, on a SQLite
file and on PostgreSQL: the policy the fork ran under keeps summarizing its remainder,
and a fork with no record about its own part reads as an empty remainder."""

from __future__ import annotations

import base64
import os
import uuid
import warnings
from uuid import UUID

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.domain.conversation import Conversation
from contextledger.infrastructure.web import create_app
from contextledger.testing import assert_valid_openai_context

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

POLICY = ReductionPolicy(trigger_messages=8, keep_messages=2, max_summary_tokens=200)


def settings(url: str, **changes: object) -> Settings:
    key = base64.b64encode(os.urandom(32)).decode()
    return Settings(database_url=url, cipher_key=key, poll_interval=0.02, **changes)  # type: ignore[arg-type]


def source(ledger: Ledger, subject: str) -> UUID:
    s = ledger.start("the source's prompt", policy=POLICY, subject=subject)
    for i in range(5):
        ledger.append(s, {"role": "user", "content": f"source question {i}"})
        ledger.append(s, {"role": "assistant", "content": f"source answer {i}"})
    return s


def test_the_policy_summarizes_a_remainder_under_the_forks_own_thresholds(shared_url: str) -> None:
    with Ledger.open(settings=settings(shared_url)) as ledger:
        s = source(ledger, "subject-s")
        f = ledger.fork(s, subject="subject-x")
        assert ledger.conversation(f).state.policy.trigger_messages == POLICY.trigger_messages
        for i in range(3):
            ledger.append(f, {"role": "user", "content": f"fork question {i}"})
        assert ledger.wait_idle(60)
        ledger.erase(subject="subject-s", reason="erasure request 1")
        assert ledger.conversation(f).state.policy.trigger_messages == POLICY.trigger_messages
        for i in range(20):
            ledger.append(f, {"role": "user", "content": f"later question {i}"})
            ledger.append(f, {"role": "assistant", "content": f"later answer {i}"})
            assert ledger.wait_idle(60)
        context = ledger.context(f)
        assert_valid_openai_context(context)
        # Summarized again: the summary and at most a trigger's worth of messages.
        assert len(context) <= POLICY.trigger_messages + 2, len(context)
        assert any(info.valid for info in ledger.summaries(f))
        assert ledger.verify().ok
        page = TestClient(create_app(ledger)).get(f"/conversations/{f}.json")  # the viewer shows its head
        assert page.status_code == 200
        assert page.json()["conversation"]["version"] == ledger.conversation(f).version


def test_a_fork_with_nothing_of_its_own_part_reads_as_an_empty_remainder(shared_url: str) -> None:
    with Ledger.open(settings=settings(shared_url, run_policy=False)) as ledger:
        s = source(ledger, "subject-s")
        # A fork as a release before restated policies made it: its first record only.
        fork = Conversation.fork(ledger.conversation(s), uuid.uuid4(), key=None, at=ledger.clock())
        ledger.subjects.assign_new(fork.id, "subject-x")
        ledger.store.create(fork)
        ledger.pop(fork.id)  # retracts inherited messages: nothing about its own part
        ledger.erase(subject="subject-s", reason="erasure request 2")
        assert ledger.transcript(fork.id) == []
        assert ledger.summaries(fork.id) == []
        client = TestClient(create_app(ledger))  # the viewer's pages of it too
        for page in (f"/conversations/{fork.id}", f"/conversations/{fork.id}.json"):
            assert client.get(page).status_code == 200, page
        assert_valid_openai_context(ledger.context(fork.id))
        assert ledger.totals(fork.id).messages == 0
        ledger.append(fork.id, {"role": "user", "content": "the fork's own"})
        assert [e.message["content"] for e in ledger.transcript(fork.id)] == ["the fork's own"]
        assert ledger.verify(fork.id).ok
        assert isinstance(ledger.verify(fork.id), cl.VerifyReport)


def test_a_fork_that_appended_nothing_before_the_erasure_appends_after_its_inherited_positions(
    shared_url: str,
) -> None:
    with Ledger.open(settings=settings(shared_url, run_policy=False)) as ledger:
        s = source(ledger, "subject-s")
        inherited_last = ledger.conversation(s).state.next_position - 1
        f = ledger.fork(s, subject="subject-x")
        ledger.edit(f, 1, {"role": "assistant", "content": "the fork's edit of an inherited answer"})
        ledger.erase(subject="subject-s", reason="erasure request 3")
        assert ledger.transcript(f) == []
        position = ledger.append(f, {"role": "user", "content": "the fork's first own message"})
        assert position == inherited_last + 1  # never a position the inherited history used
        assert [e.position for e in ledger.transcript(f)] == [position]
        assert ledger.verify(f).ok
