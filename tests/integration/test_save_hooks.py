"""The conversation store's saves skip the recordings that eventsourcing's ``save``
returns, unless a subclass hooks what receives them: then every saved event still
reaches the hook, and either way the log holds the same bytes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.persistence import Recording

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryResult

CID = UUID(int=7)
POLICY = ReductionPolicy(trigger_messages=6, keep_messages=2)


class Ticking:
    """A clock that moves one second per reading, the same in every ledger."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 1, tzinfo=UTC)

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=1)
        return self.now


class Hooked(Ledger):
    """A subclass that takes eventsourcing's hook for recordings."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.recordings: list[Recording[UUID]] = []
        super().__init__(*args, **kwargs)

    def _notify(self, recordings: Sequence[Recording[UUID]]) -> None:
        self.recordings.extend(recordings)


def work(ledger: Ledger) -> None:
    """Start, append, extend, answer a tool call, summarize: every kind of save."""
    ledger.start("You are terse.", conversation_id=CID, policy=POLICY)
    for i in range(5):
        ledger.append(CID, {"role": "user" if i % 2 == 0 else "assistant", "content": f"turn {i}"})
    ledger.append(
        CID,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        },
    )
    ledger.extend(
        CID, [{"role": "tool", "tool_call_id": "c1", "content": "42"}, {"role": "user", "content": "ok"}]
    )
    ledger.append(CID, {"role": "assistant", "content": "done"}, client_message_id="m-1")
    request = ledger.pending_summary(CID)
    assert request is not None
    ledger.record_summary(request, SummaryResult(text="Turns 0-4.", model="fixed", prompt_version="fixed-1"))


def stores(tmp_path: Path, kind: str, name: str) -> str:
    return "memory://" if kind == "memory" else f"sqlite:///{tmp_path / name}"


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
def test_the_store_writes_the_same_log_whether_or_not_a_hook_takes_recordings(
    tmp_path: Path, kind: str
) -> None:
    logs = []
    for cls, name in ((Ledger, "lean.db"), (Hooked, "hooked.db")):
        # Records in clear (no per-subject keys): equal bytes mean the same log, where
        # each store's own random data keys would make every record differ.
        settings = Settings(database_url=stores(tmp_path, kind, name), run_policy=False, key_scope="store")
        with cls(settings, clock=Ticking()) as ledger:
            work(ledger)
            logs.append([_same_log_form(ledger, stored) for stored in ledger.recorder.select_events(CID)])
    lean, hooked = logs
    assert len(lean) > 10 and lean == hooked


#: A link's salt is random (and so its commitment, every digest after it and the seals
#: over them): two ledgers doing the same work write the same records but for those.
_RANDOM = {"salt", "commitment", "digest", "seal"}


def _same_log_form(ledger: Ledger, stored: Any) -> tuple[Any, ...]:
    """A stored record as the comparison sees it: its place and topic, and its event's
    fields but for the random ones; and its bytes where it carries no salt."""
    event = ledger.mapper.to_domain_event(stored)
    fields = event.model_dump(mode="json", exclude=_RANDOM)
    salted = getattr(event, "salt", None) is not None
    return (
        stored.originator_id,
        stored.originator_version,
        stored.topic,
        fields,
        None if salted else bytes(stored.state),
    )


@pytest.mark.parametrize("kind", ["memory", "sqlite", "postgres"])
def test_a_subclass_hooking_notify_gets_a_recording_of_every_saved_event(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    if kind == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = stores(tmp_path, kind, "hooked.db")
    ledger = Hooked(Settings(database_url=url, run_policy=False), clock=Ticking())
    with ledger:
        work(ledger)
        notifications = ledger.recorder.select_notifications(start=None, limit=1000)
        assert len(notifications) > 10
        assert [(r.notification.id, r.notification.originator_version) for r in ledger.recordings] == [
            (n.id, n.originator_version) for n in notifications
        ]
        assert [r.domain_event.originator_version for r in ledger.recordings] == [
            n.originator_version for n in notifications
        ]
        assert not ledger._lean_save
