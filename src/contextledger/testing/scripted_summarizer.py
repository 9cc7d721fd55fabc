"""``ScriptedSummarizer``: a ``Summarizer`` for tests that fails as scripted, waits as
told and records every call, so faults and concurrency can be arranged, not hoped for."""

from __future__ import annotations

import threading
import time
from collections import Counter
from uuid import UUID

from contextledger.application.shared.ports import SummaryRequest, SummaryResult

__all__ = ["ScriptedSummarizer"]


class ScriptedSummarizer:
    """A deterministic summarizer with scripted failures, delays, holds and a barrier.

    - ``failures``: raised by the first calls, one per call, in order (e.g.
      ``SummarizerUnavailableError("down")``); later calls succeed.
    - ``delay`` / ``slow``: seconds every call (or a conversation's calls) takes.
    - ``hold``: calls for a conversation block until its ``threading.Event`` is set.
    - ``gate``: every call waits at this ``threading.Barrier`` (shared between
      summarizers) until as many calls are in flight.

    It records ``calls`` as ``(conversation_id, from_position, through_position)``,
    the most calls in flight (``max_in_flight``, ``max_in_flight_per_conversation``)
    and when each conversation's last call finished (``finished_at``, monotonic).
    Its summary reads ``"Summary of F-T."``.
    """

    model = "scripted"

    def __init__(
        self,
        failures: list[Exception] | None = None,
        *,
        delay: float = 0.0,
        slow: dict[UUID, float] | None = None,
        hold: dict[UUID, threading.Event] | None = None,
        gate: threading.Barrier | None = None,
        wait_timeout: float = 60.0,
    ) -> None:
        self.failures = list(failures or [])
        self.delay = delay
        self.slow = slow or {}
        self.hold = hold or {}
        self.gate = gate
        #: How long a held or gated call waits at most (a test that forgot to release
        #: it fails instead of hanging).
        self.wait_timeout = wait_timeout
        self.calls: list[tuple[UUID, int, int]] = []
        self.lock = threading.Lock()
        self.in_flight: Counter[UUID] = Counter()
        self.max_in_flight_per_conversation = 0
        self.max_in_flight = 0
        self.finished_at: dict[UUID, float] = {}

    def __repr__(self) -> str:
        return f"ScriptedSummarizer(calls={len(self.calls)}, failures_left={len(self.failures)})"

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        """Record the call, wait as arranged, then fail as scripted or summarize."""
        cid = request.conversation_id
        with self.lock:
            self.calls.append((cid, request.from_position, request.through_position))
            self.in_flight[cid] += 1
            self.max_in_flight_per_conversation = max(
                self.max_in_flight_per_conversation, self.in_flight[cid]
            )
            self.max_in_flight = max(self.max_in_flight, sum(self.in_flight.values()))
            failure = self.failures.pop(0) if self.failures else None
        try:
            if cid in self.hold:
                self.hold[cid].wait(self.wait_timeout)
            if self.gate is not None:
                self.gate.wait(self.wait_timeout)
            pause = self.slow.get(cid, self.delay)
            if pause:
                time.sleep(pause)  # a slow provider is the scenario, not a synchronization
            if failure is not None:
                raise failure
            return SummaryResult(
                text=f"Summary of {request.from_position}-{request.through_position}.",
                model=self.model,
                prompt_version="s1",
                input_tokens=50,
                output_tokens=8,
                latency_ms=1.0,
            )
        finally:
            with self.lock:
                self.in_flight[cid] -= 1
                self.finished_at[cid] = time.monotonic()
