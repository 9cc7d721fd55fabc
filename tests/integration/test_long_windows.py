"""A long window (a trigger far above the messages' count, as a token trigger over
short messages gives): appends keep their cost flat (running sums, snapshots taken
less often as the window grows), and a conversation loaded cold from its snapshot and
the events after it is the one the writer holds."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

import contextledger as cl
from contextledger.application import Ledger, Settings
from contextledger.application.storage.store import snapshot_step

INTERVAL = 10


@pytest.mark.parametrize(
    ("window", "step"),
    [(0, 10), (79, 10), (80, 20), (159, 20), (160, 40), (1000, 160), (5000, 640)],
)
def test_the_snapshot_step_doubles_while_it_stays_within_a_quarter_window(window: int, step: int) -> None:
    assert snapshot_step(INTERVAL, window) == step
    # every step is the interval times a power of two: boundaries of a longer one are
    # boundaries of the shorter ones
    assert step % INTERVAL == 0 and (step // INTERVAL) & (step // INTERVAL - 1) == 0


def message(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} about the order"}


def test_a_long_window_is_snapshotted_less_often_and_loads_cold_to_the_same_state(shared_url: str) -> None:
    url = shared_url
    policy = cl.ReductionPolicy(trigger_messages=5000, keep_messages=10)
    with Ledger(Settings(database_url=url, snapshot_interval=INTERVAL, run_policy=False)) as ledger:
        cid = ledger.start("sys", policy=policy)
        for i in range(1201):
            ledger.append(cid, message(i))
        live = ledger.conversation(cid)
        context = ledger.context(cid)
        tokens = ledger.totals(cid).context_tokens
        assert ledger.snapshots is not None
        versions = [s.originator_version for s in ledger.snapshots.get(cid)]
    # At a fixed interval this would be 120 snapshots of an ever longer window; the
    # step grows with the window instead (10 versions apart at first, 160 at the end).
    assert 10 <= len(versions) <= 30, versions
    gaps = [b - a for a, b in itertools.pairwise(versions)]
    assert gaps[0] <= 20 and max(gaps) >= 160
    assert live.version - versions[-1] <= snapshot_step(INTERVAL, len(live.state.window))
    with Ledger(Settings(database_url=url, snapshot_interval=INTERVAL, run_policy=False)) as cold:
        loaded = cold.conversation(cid)
        assert loaded.version == live.version and loaded.state == live.state
        assert cold.context(cid) == context
        # the running sums start afresh on the loaded state and agree with the writer's
        assert cold.totals(cid).context_tokens == tokens
        cold.append(cid, message(1201))
        assert cold.totals(cid).context_tokens > tokens
