"""A wait for a conversation's lock that runs out says whether the store is away."""

from __future__ import annotations

import threading
import time

from contextledger.application.storage.outage import Outages
from contextledger.domain.values.errors import StoreError


def _call_on_the_store(outages: Outages, seconds: float, error: StoreError | None) -> threading.Thread:
    """A call holding its conversation's lock that ends after ``seconds`` with ``error``."""
    token = outages.begin()

    def run() -> None:
        time.sleep(seconds)
        outages.end(token, error)

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_wait_that_runs_out_while_the_call_ahead_fails_on_an_outage_raises_that_outage() -> None:
    outages = Outages(grace=5.0)
    started = time.monotonic()
    ahead = _call_on_the_store(outages, 0.3, StoreError("couldn't get a connection", cause="connect_timeout"))
    error = outages.gave_up(started, None)  # the deadline: the call ahead is still on the store
    waited = time.monotonic() - started
    ahead.join()
    assert isinstance(error, StoreError) and error.cause == "connect_timeout"
    assert "unavailable (connect_timeout)" in str(error)
    assert 0.25 < waited < 3.0  # until the call ahead failed, not the whole grace


def test_an_outage_seen_since_the_wait_began_is_named_at_once() -> None:
    outages = Outages(grace=5.0)
    started = time.monotonic()
    _call_on_the_store(outages, 0.0, StoreError("server closed the connection", cause="connection_lost")).join()
    error = outages.gave_up(started, None)
    assert error is not None and error.cause == "connection_lost"
    # A wait that began after it is not told of it.
    assert outages.gave_up(time.monotonic(), None) is None


def test_plain_contention_is_no_outage() -> None:
    outages = Outages(grace=5.0)
    started = time.monotonic()
    ahead = _call_on_the_store(outages, 0.1, None)  # the store answers
    assert outages.gave_up(started, None) is None
    ahead.join()
    failed = _call_on_the_store(outages, 0.0, StoreError("canceling statement", cause="statement_timeout"))
    failed.join()
    assert outages.gave_up(started, None) is None  # a slow statement is not an outage
