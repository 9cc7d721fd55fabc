"""Summarizers for tests: scripted failures, delays and a record of every call."""

from __future__ import annotations

import threading
import time
from collections import Counter
from uuid import UUID

from contextledger.application import SummaryRequest, SummaryResult


class ScriptedSummarizer:
    """Fails as scripted per call number, sleeps as told, records concurrency."""

    model = "scripted"

    def __init__(self, failures: list[Exception] | None = None, delay: float = 0.0,
                 slow: dict[UUID, float] | None = None, hold: dict[UUID, threading.Event] | None = None,
                 gate: threading.Barrier | None = None) -> None:
        self.failures = list(failures or [])
        self.delay = delay
        self.slow = slow or {}
        #: Calls for these conversations block until their event is set.
        self.hold = hold or {}
        #: Every call waits here until as many calls (of any summarizer) are in flight.
        self.gate = gate
        self.calls: list[tuple[UUID, int, int]] = []
        self.lock = threading.Lock()
        self.in_flight: Counter[UUID] = Counter()
        self.max_in_flight_per_conversation = 0
        self.max_in_flight = 0
        self.finished_at: dict[UUID, float] = {}

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        cid = request.conversation_id
        with self.lock:
            self.calls.append((cid, request.from_position, request.through_position))
            self.in_flight[cid] += 1
            self.max_in_flight_per_conversation = max(self.max_in_flight_per_conversation,
                                                      self.in_flight[cid])
            self.max_in_flight = max(self.max_in_flight, sum(self.in_flight.values()))
            failure = self.failures.pop(0) if self.failures else None
        try:
            if cid in self.hold:
                self.hold[cid].wait(60)
            if self.gate is not None:
                self.gate.wait(60)
            time.sleep(self.slow.get(cid, self.delay))
            if failure is not None:
                raise failure
            return SummaryResult(text=f"Summary of {request.from_position}-{request.through_position}.",
                                 model="scripted", prompt_version="s1", input_tokens=50,
                                 output_tokens=8, latency_ms=1.0)
        finally:
            with self.lock:
                self.in_flight[cid] -= 1
                self.finished_at[cid] = time.monotonic()
