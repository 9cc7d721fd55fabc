"""The ledger's work in the background and the listeners of its saves.

A ``Background`` holds what follows one ledger's log in this process: the
summarization policy (``start_policy``), the followers attached to it (read-model
runners, a user's own), and the listeners called after each save (they wake the
followers). ``wait_idle`` waits for all of them, ``stop`` ends them (``close``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from contextledger.application.facade.lifecycle import stop_all
from contextledger.application.shared.observability import NullTracer, TracedSummarizer, Tracer
from contextledger.application.shared.ports import Summarizer, SummaryRequest, SummaryResult

if TYPE_CHECKING:
    from contextledger.application.summaries.summarization import PolicyHost

__all__ = ["FOREIGN_THRESHOLD_DELAY", "Background", "DeferredSummarizer", "wait_all"]

#: Seconds the in-process policy waits before summarizing a threshold that another
#: process saved (that process's own policy summarizes it at once; the wait spares a
#: second summarizer call for the same crossing). Workers wait for nothing.
FOREIGN_THRESHOLD_DELAY = 2.0


class DeferredSummarizer:
    """A summarizer built when it is first used (``get`` returns it, built or not)."""

    def __init__(self, get: Callable[[], Summarizer]) -> None:
        self._get = get

    @property
    def model(self) -> str:
        return self._get().model

    @model.setter
    def model(self, value: str) -> None:
        self._get().model = value

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        return self._get().summarize(request)


class Background:
    """The policy, the attached followers and the save listeners of one ledger."""

    def __init__(self) -> None:
        self.listeners: list[tuple[Callable[[], None], frozenset[str] | None]] = []
        self.event_listeners: list[Callable[[Sequence[Any]], None]] = []
        #: The summarization policy of this process (None until ``start_policy``).
        self.runner: Any = None
        self.followers: list[Any] = []

    def add_listener(self, listener: Callable[[], None], topics: Iterable[str] | None) -> None:
        self.listeners.append((listener, None if topics is None else frozenset(topics)))

    def add_event_listener(self, listener: Callable[[Sequence[Any]], None]) -> None:
        self.event_listeners.append(listener)

    def saved(self, events: Sequence[Any] = ()) -> None:
        """Call the listeners after a save of ``events`` (the store's ``on_saved``)."""
        for event_listener in self.event_listeners:
            event_listener(events)
        saved: set[str] | None = None
        for listener, topics in self.listeners:
            if topics is not None:
                if saved is None:
                    saved = {getattr(e, "TOPIC", "") for e in events}
                if topics.isdisjoint(saved):
                    continue
            listener()

    def start_policy(self, host: PolicyHost, summarizer: Callable[[], Summarizer], tracer: Tracer) -> None:
        """Run the summarization policy for ``host`` (once), with the summarizer
        ``summarizer`` returns when a summary is first due."""
        if self.runner is not None:
            return
        from contextledger.application.summaries.summarization import SummarizationRunner

        # Built on the first summary, not here: opening a ledger (and its first
        # context()) does not wait for a tokenizer to load.
        deferred: Summarizer = DeferredSummarizer(summarizer)
        if not isinstance(tracer, NullTracer):
            deferred = TracedSummarizer(deferred, tracer)
        # Thresholds this process saved are summarized at once; those of other
        # writer processes wait a little, so their own policy goes first and
        # the summarizer is not called once per process for one crossing.
        self.runner = SummarizationRunner(host, deferred, foreign_delay=FOREIGN_THRESHOLD_DELAY)
        self.runner.start()

    def attach(self, follower: Any) -> None:
        follower.start()
        self.followers.append(follower)

    def stop(self) -> None:
        """Stop the followers, newest first, then the policy."""
        stop_all([*reversed(self.followers), self.runner])

    def wait_idle(self, timeout: float | None) -> bool:
        """Whether the policy and the followers caught up within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        followers = [*([self.runner] if self.runner is not None else []), *self.followers]
        for follower in followers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not follower.wait_idle(remaining):
                return False
        # Summaries recorded while a later follower caught up: check the policy once more.
        if self.runner is not None and self.followers:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            return bool(self.runner.wait_idle(remaining))
        return True


def wait_all(group: Sequence[Background], timeout: float | None) -> bool:
    """``wait_idle`` over the ledgers of several stores, within one ``timeout``."""
    deadline = None if timeout is None else time.monotonic() + timeout
    for background in group:
        remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
        if not background.wait_idle(remaining):
            return False
    return True
