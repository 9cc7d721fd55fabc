"""Retention on a real SQLite file and on PostgreSQL: which conversations are idle (read
from the log), which data subjects retention erases (all their conversations idle),
erased subjects left out, and the enforcer that runs it in the background."""

from __future__ import annotations

import base64
import os
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

import contextledger as cl
from contextledger.application.privacy.retention import (
    RetentionEnforcer,
    enforce_retention,
    retention_plan,
    retention_reason,
)
from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Clock:
    """The ledger's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def open_ledger(url: str, clock: Clock, **options: Any) -> cl.Ledger:
    key = base64.b64encode(os.urandom(32)).decode()
    settings = cl.Settings(database_url=url, run_policy=False, cipher_key=key, **options)
    return cl.Ledger.open(url, settings=settings, clock=clock)


def say(ledger: cl.Ledger, cid: UUID, text: str = "hello") -> None:
    ledger.append(cid, {"role": "user", "content": text})


class Erasures:
    """Records what retention asks to erase, and erases it with the key table's
    tombstone (the foundation ``Ledger.erase`` builds on)."""

    def __init__(self, ledger: cl.Ledger) -> None:
        self.ledger = ledger
        self.calls: list[dict[str, Any]] = []

    def __call__(self, *, subject: str | None = None, conversation: UUID | None = None, reason: str) -> str:
        self.calls.append({"subject": subject, "conversation": conversation, "reason": reason})
        keys = subject_keys_of(self.ledger)
        assert keys is not None
        named = subject if subject is not None else keys.subject_of(conversation)  # type: ignore[arg-type]
        keys.tombstone(named, reason)
        return named


@pytest.fixture
def world(shared_url: str) -> Any:
    """Conversations started on day 0 and written to on later days:

    - ``old_a``, ``old_b``: subject user-old, last event day 1;
    - ``mixed_old`` (day 1) and ``mixed_new`` (day 40): subject user-mixed;
    - ``own_old``: its own subject, day 2; ``own_new``: its own, day 40."""
    clock = Clock()
    ledger = open_ledger(shared_url, clock)
    c: dict[str, UUID] = {}
    c["old_a"] = ledger.start(policy=POLICY, subject="user-old")
    c["old_b"] = ledger.start(policy=POLICY, subject="user-old")
    c["mixed_old"] = ledger.start(policy=POLICY, subject="user-mixed")
    c["mixed_new"] = ledger.start(policy=POLICY, subject="user-mixed")
    c["own_old"] = ledger.start(policy=POLICY)
    c["own_new"] = ledger.start(policy=POLICY)
    clock.now = T0 + timedelta(days=1)
    for name in ("old_a", "old_b", "mixed_old"):
        say(ledger, c[name])
    clock.now = T0 + timedelta(days=2)
    say(ledger, c["own_old"])
    clock.now = T0 + timedelta(days=40)
    say(ledger, c["mixed_new"])
    say(ledger, c["own_new"])
    clock.now = T0 + timedelta(days=45)
    yield ledger, c, clock
    ledger.close()


def test_idle_conversations_are_those_whose_last_event_is_older_than_the_days(world: Any) -> None:
    ledger, c, _ = world
    assert ledger.idle_conversations(30) == [c["old_a"], c["old_b"], c["mixed_old"], c["own_old"]]
    # 43.5 days: day 1 is idle, day 2 is not yet (45 - 43.5 = 1.5).
    assert ledger.idle_conversations(43.5) == [c["old_a"], c["old_b"], c["mixed_old"]]
    assert ledger.idle_conversations(10) == [c["old_a"], c["old_b"], c["mixed_old"], c["own_old"]]
    # Exactly ``days`` old is not older than ``days``.
    assert ledger.idle_conversations(4, now=T0 + timedelta(days=44)) == ledger.idle_conversations(10)
    assert ledger.idle_conversations(3) == list(c.values())
    assert ledger.idle_conversations(50) == []
    # A new event wakes a conversation up.
    say(ledger, c["own_old"])
    assert c["own_old"] not in ledger.idle_conversations(30)


@pytest.mark.parametrize("bad", [0, -1, True, "30", None, float("nan")])
def test_a_bad_number_of_days_is_refused(world: Any, bad: Any) -> None:
    ledger, _, _ = world
    with pytest.raises(cl.InvalidArgumentError) as caught:
        ledger.idle_conversations(bad)
    assert caught.value.argument == "days"


def test_a_naive_now_is_refused(world: Any) -> None:
    ledger, _, _ = world
    with pytest.raises(cl.InvalidArgumentError, match="time zone"):
        ledger.idle_conversations(30, now=datetime(2026, 3, 1))


def test_retention_erases_a_subject_once_all_its_conversations_are_idle(world: Any) -> None:
    ledger, c, _ = world
    plan = retention_plan(ledger, 30)
    assert [(d.subject, d.conversations) for d in plan] == [
        ("user-old", (c["old_a"], c["old_b"])),
        (str(c["own_old"]), (c["own_old"],)),
    ]
    assert plan[0].last_event_at == T0 + timedelta(days=1)
    erase = Erasures(ledger)
    assert enforce_retention(ledger, erase, 30) == ["user-old", str(c["own_old"])]
    reason = retention_reason(30)
    assert reason == "retention: idle 30 days"
    # One subject of several conversations: by subject; a conversation alone: by conversation.
    assert erase.calls == [
        {"subject": "user-old", "conversation": None, "reason": reason},
        {"subject": None, "conversation": c["own_old"], "reason": reason},
    ]
    # Erased ones are no longer idle, nor due; the rest reads as before.
    assert ledger.idle_conversations(30) == [c["mixed_old"]]
    assert retention_plan(ledger, 30) == []
    assert enforce_retention(ledger, erase, 30) == []
    keys = subject_keys_of(ledger)
    assert keys is not None and keys.is_erased("user-old") and not keys.is_erased("user-mixed")
    assert ledger.context(c["mixed_old"])[-1]["content"] == "hello"


def test_a_subject_written_to_after_the_plan_is_not_erased(world: Any) -> None:
    ledger, c, _ = world
    erase = Erasures(ledger)

    class Waking(Erasures):
        def __call__(self, **kwargs: Any) -> str:
            say(ledger, c["own_old"])  # the next subject wakes up before its turn
            return erase(**kwargs)

    assert enforce_retention(ledger, Waking(ledger), 30) == ["user-old"]
    assert [call["subject"] for call in erase.calls] == ["user-old"]


def test_a_failing_erasure_is_logged_and_the_others_still_go(world: Any) -> None:
    ledger, c, _ = world
    erase = Erasures(ledger)

    def flaky(**kwargs: Any) -> str:
        if kwargs.get("subject") == "user-old":
            raise cl.StoreError("the store went away")
        return erase(**kwargs)

    assert enforce_retention(ledger, flaky, 30) == [str(c["own_old"])]
    assert ledger.idle_conversations(30) == [c["old_a"], c["old_b"], c["mixed_old"]]


def test_the_enforcer_runs_a_pass_at_start_then_every_interval(world: Any) -> None:
    ledger, c, clock = world
    erase = Erasures(ledger)
    enforcer = RetentionEnforcer(ledger, erase, 30, interval=0.05)
    ledger.attach(enforcer)
    assert ledger.wait_idle(10)
    assert [str(s) for s in enforcer.erased] == ["user-old", str(c["own_old"])]
    clock.now = T0 + timedelta(days=80)  # everything is idle now
    deadline = datetime.now(UTC) + timedelta(seconds=10)
    while len(enforcer.erased) < 4 and datetime.now(UTC) < deadline:
        enforcer.wait_idle(1)
    assert enforcer.erased[2:] == ["user-mixed", str(c["own_new"])]
    ledger.close()  # stops the enforcer with the ledger's other followers
    assert enforcer._thread is None


def test_the_enforcer_refuses_bad_arguments(world: Any) -> None:
    ledger, _, _ = world
    with pytest.raises(cl.InvalidArgumentError):
        RetentionEnforcer(ledger, Erasures(ledger), 0)
    with pytest.raises(cl.InvalidArgumentError):
        RetentionEnforcer(ledger, Erasures(ledger), 30, interval=0)


def test_retention_idle_days_is_a_setting_read_from_the_environment() -> None:
    assert cl.Settings().retention_idle_days is None
    settings = cl.Settings.from_env({"CONTEXTLEDGER_RETENTION_IDLE_DAYS": "90"})
    assert settings.retention_idle_days == 90
    for bad in ("0", "-3", "soon"):
        with pytest.raises(cl.ConfigurationError, match="retention_idle_days"):
            cl.Settings.from_env({"CONTEXTLEDGER_RETENTION_IDLE_DAYS": bad})


def test_a_source_is_kept_while_a_fork_of_another_subject_holding_its_content_is_active(
    shared_url: str,
) -> None:
    clock = Clock()
    with open_ledger(shared_url, clock) as ledger:
        source = ledger.start(policy=POLICY, subject="user-1")
        say(ledger, source, "the source's words")
        fork = ledger.fork(source, subject="team-2")
        grand = ledger.fork(fork, key="grand")  # team-2's, holding user-1's words too
        clock.now = T0 + timedelta(days=40)
        say(ledger, grand, "still in use")
        now = T0 + timedelta(days=45)
        # user-1's only conversation is idle, but grand holds its content and is not.
        assert retention_plan(ledger, 30, now) == []
        assert ledger.idle_conversations(30, now=now) == [source, fork]
        later = T0 + timedelta(days=80)
        plan = {due.subject: due for due in retention_plan(ledger, 30, later)}
        assert set(plan) == {"user-1", "team-2"}
        assert plan["user-1"].conversations == (source,) and set(plan["user-1"].holders) == {fork, grand}
        assert plan["team-2"].holders == ()
        clock.now = later
        reports = enforce_retention(ledger, ledger.erase, 30)
        assert {r.subject for r in reports} == {"user-1", "team-2"}
        assert ledger.idle_conversations(1, now=later + timedelta(days=10)) == []


def test_a_fork_whose_source_was_erased_is_idle_as_any_other_and_its_subject_goes(shared_url: str) -> None:
    clock = Clock()
    with open_ledger(shared_url, clock) as ledger:
        source = ledger.start(policy=POLICY, subject="user-1")
        say(ledger, source, "the source's words")
        fork = ledger.fork(source, subject="team-2")
        say(ledger, fork, "the fork's own words")
        kept = ledger.start(policy=POLICY, subject="user-3")
        say(ledger, kept)
        ledger.erase(subject="user-1", reason="asked")
        # The fork keeps what is its own: it is listed as idle as any other ...
        assert ledger.context(fork) == [{"role": "user", "content": "the fork's own words"}]
        later = T0 + timedelta(days=100)
        assert ledger.idle_conversations(30, now=later) == [fork, kept]
        # ... and its own records are team-2's, which retention erases once idle.
        assert {due.subject for due in retention_plan(ledger, 30, later)} == {"team-2", "user-3"}
        clock.now = later
        reports = enforce_retention(ledger, ledger.erase, 30)
        assert {r.subject for r in reports} == {"team-2", "user-3"}
        assert ledger.idle_conversations(30, now=later) == []
