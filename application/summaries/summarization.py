"""The summarization policy: follows the log, summarizes pinned ranges.

It follows the ledger's log (a ``LogFollower``: polling, since a SQLite store cannot
notify; an in-process append wakes it at once), reads ``ThresholdReached``
notifications, and for each conversation with a pending range asks the summarizer for
exactly that range and records the result through the ledger. The aggregate rejects a late or duplicate
result, so a retry after a crash, or two workers racing, still leaves one
``SummaryCreated`` per range.

- At most one summarization per conversation is in flight; up to
  ``max_concurrent_summaries`` for different conversations run in parallel.
- Failures (whatever a summarizer raises) are recorded as ``SummarizationFailed``
  and retried with exponential backoff (honouring a provider's ``Retry-After`` up to
  ``retry_max_seconds``); the conversation keeps working under its hard cap meanwhile. A failure that a retry
  cannot mend (``retryable=False``: a refused key or permission, an invalid request)
  hands the range to the offline fallback at once, when one is configured; so do
  ``fallback_after_attempts`` failures, or ``retry_total_seconds`` of them.
- Progress is a tracking row: the lowest notification id whose work is not done, so
  a restarted worker resumes where its unfinished work began. While the log keeps
  bringing work the row is written at most every ``MARK_INTERVAL`` seconds (each write
  is a transaction and a flush on the store, and a busy writer's policy steps twenty
  times a second); it is written at once when a step finds nothing to do and when
  the policy stops. A crash can cost re-reading that second of the log: a threshold
  read twice finds its range summarized, and nothing is summarized twice.
"""

from __future__ import annotations

import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from concurrent.futures import BrokenExecutor, Future, ThreadPoolExecutor
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import (
    InfrastructureFactory,
    IntegrityError,
    Mapper,
    Notification,
    PersistenceError,
    Tracking,
)

from contextledger.application.following.follower import FollowedLog, LogFollower, Shard
from contextledger.application.shared.ports import Summarizer, SummaryRequest
from contextledger.application.summaries.summary_attempts import Outcome, SummaryRecorder, attempt_summary
from contextledger.domain import events
from contextledger.domain.values.errors import ContextLedgerError, ConversationErasedError, LedgerClosedError

__all__ = ["Outcome", "PolicyHost", "SummarizationRunner", "summarize_pending"]

log = logging.getLogger("contextledger.summarization")

TRACKING_NAME = "summarizer"

#: Seconds between two writes of the progress row while every step finds work.
MARK_INTERVAL = 1.0

#: Seconds between two reads of the log by a policy that learns of its own process's
#: thresholds from its saves (``foreign_delay`` > 0): the log then brings it only the
#: thresholds of other processes, which wait ``foreign_delay`` anyway.
LOG_READ_INTERVAL = 1.0


class PendingSummaries(SummaryRecorder, Protocol):
    """What one summarization needs of the ledger: the range a conversation waits
    for, the offline fallback, the settings and the recording of the outcome."""

    def pending_summary(self, conversation_id: UUID) -> SummaryRequest | None: ...

    @property
    def fallback_summarizer(self) -> Summarizer | None: ...


class PolicyHost(PendingSummaries, FollowedLog, Protocol):
    """What the policy needs of the ledger besides: its log, the events of its saves
    (thresholds this process saved), its tracking rows and its mapper."""

    def add_event_listener(self, listener: Callable[[Sequence[Any]], None]) -> None:
        """Call ``listener`` with the events of each save of this process."""
        ...

    @property
    def factory(self) -> InfrastructureFactory[Any]: ...

    @property
    def mapper(self) -> Mapper[UUID]: ...


def summarize_pending(
    ledger: PendingSummaries,
    summarizer: Summarizer,
    conversation_id: UUID,
    *,
    backoff: Callable[[int], float],
    out_of_time: bool = False,
    only_threshold: int | None = None,
) -> Outcome:
    """Summarize the conversation's pending range once; record success or failure.

    The offline fallback (when configured) takes over a range at once after a
    failure that retrying cannot mend (authentication, permission, invalid request),
    after ``fallback_after_attempts`` failures, or when ``out_of_time`` says the
    range has been retried for ``retry_total_seconds`` already. With
    ``only_threshold``, nothing is done unless the pending range is the one of the
    threshold saved at that version (a later one has a threshold of its own)."""
    request = ledger.pending_summary(conversation_id)
    if request is None or only_threshold not in (None, request.threshold_version):
        return Outcome()
    fallback = ledger.fallback_summarizer
    limit = ledger.settings.fallback_after_attempts
    if fallback is not None and summarizer is not fallback:
        why = None
        if limit is not None and request.attempt > limit:
            why = f"failed {request.attempt - 1} times"
        elif out_of_time:
            why = f"kept failing for {ledger.settings.retry_total_seconds:g} s"
        if why is not None:
            log.warning(
                "summarization of %s positions %d-%d %s: the offline summarizer takes over",
                conversation_id,
                request.from_position,
                request.through_position,
                why,
            )
            summarizer = fallback
    outcome = attempt_summary(ledger, summarizer, request, backoff)
    if outcome.refused is None or fallback is None or summarizer is fallback:
        return outcome
    log.error(
        "summarization of %s positions %d-%d cannot succeed with this summarizer (%s): "
        "the offline summarizer takes over",
        conversation_id,
        request.from_position,
        request.through_position,
        outcome.refused,
    )
    request = ledger.pending_summary(conversation_id)
    if request is None:
        return Outcome()
    return attempt_summary(ledger, fallback, request, backoff)


class SummarizationRunner(LogFollower):
    """Runs the summarization policy for one ledger in background threads."""

    thread_name = "contextledger-policy"
    #: An append that crosses no threshold has nothing for the policy: it does not
    #: wake the thread (an idle policy costs an append nothing).
    wake_topics = (events.ThresholdReached.TOPIC,)

    ledger: PolicyHost

    def __init__(
        self,
        ledger: PolicyHost,
        summarizer: Summarizer,
        *,
        max_concurrent: int | None = None,
        shard: Shard | None = None,
        tracking_name: str | None = None,
        foreign_delay: float = 0.0,
    ) -> None:
        super().__init__(ledger, shard=shard)
        self.summarizer = summarizer
        #: Seconds before a threshold saved by another process falls due (0: at once).
        self.foreign_delay = foreign_delay
        #: conversation -> versions of the thresholds this process saved that the log
        #: has not brought yet.
        self._local: dict[UUID, set[int]] = {}
        #: conversation -> the log position + 1 when this process saved a threshold of
        #: it, since the last step (the threshold's notification id is no lower).
        self._arrived: dict[UUID, int] = {}
        #: Callers of ``wait_idle`` now (each step reads the log while there are any).
        self._waiters = 0
        #: When the log is read next (with a ``foreign_delay``; else at every step).
        self._next_read = 0.0
        #: conversation -> version of the other process's threshold it waits for.
        self._foreign: dict[UUID, int] = {}
        if foreign_delay > 0:
            ledger.add_event_listener(self._note_local)
        self.max_concurrent = max_concurrent or ledger.settings.max_concurrent_summaries
        # Each shard keeps its own progress row.
        self.tracking_name = tracking_name or (
            TRACKING_NAME if shard is None else f"{TRACKING_NAME}-{shard[0]}-of-{shard[1]}"
        )
        self._executor: ThreadPoolExecutor | None = None
        #: conversation -> (due monotonic time, first notification id not yet done)
        self._due: dict[UUID, tuple[float, int]] = {}
        self._inflight: dict[UUID, tuple[Future[Outcome], int]] = {}
        #: conversation -> monotonic time of the first failure of its pending range
        self._failing_since: dict[UUID, float] = {}
        self._tracking = ledger.factory.tracking_recorder()
        self._position = self._tracking.max_tracking_id(self.tracking_name) or 0
        self._saved_mark = self._position
        self._saved_at = time.monotonic()
        self._caught_up_to = -1

    @property
    def name(self) -> str:
        return self.tracking_name

    # -- LogFollower ----------------------------------------------------------------

    def _starting(self) -> None:
        self._executor = ThreadPoolExecutor(
            max_workers=self.max_concurrent, thread_name_prefix="contextledger-summarizer"
        )

    def _stopped(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None
        # The progress the last steps made, written now (a busy policy writes it at
        # most every MARK_INTERVAL); a store that cannot answer leaves it behind.
        with contextlib.suppress(ContextLedgerError, PersistenceError):
            self._collect()
            self._save_mark()

    def log_position(self) -> int:
        return self._position

    def read_through(self, head: int) -> bool:
        return self._caught_up_to >= head

    def idle_at(self, head: int) -> bool:
        """The log is read through ``head`` and no summary is in flight, due, or saved
        by this process and not yet taken (``_arrived``: a step reads the log, which
        skips this process's own thresholds, before it takes them)."""
        with self._progress:
            return self._caught_up_to >= head and not self._due and not self._inflight and not self._arrived

    def step(self) -> int:
        """Read new notifications, collect finished jobs, start due ones; returns the
        number of jobs started, plus the thresholds due now and the jobs collected
        (what keeps the thread polling at ``poll_interval``).

        With a ``foreign_delay`` (the ledger's own policy), the thresholds this process
        saves are taken from its saves at once, and the log -- which then brings only
        other processes' thresholds, due ``foreign_delay`` later -- is read every
        ``LOG_READ_INTERVAL`` and while someone waits in ``wait_idle``: a busy writer's
        policy does not query the store on every threshold and every finished job."""
        found = 0
        if self.foreign_delay <= 0 or self._waiters > 0 or time.monotonic() >= self._next_read:
            found = self._read_log()
        found += self._take_local()
        found += self._collect()
        started = self._dispatch()
        self._save_mark(idle=started + found == 0)
        return started + found

    def poll_wait(self, idle_steps: int) -> float:
        """As ``LogFollower.poll_wait``, but never past the next retry that falls due;
        with a ``foreign_delay``, until the next read of the log (its own thresholds
        and finished jobs wake the thread)."""
        if self.foreign_delay > 0:
            wait = max(self.poll_interval, self._next_read - time.monotonic())
        else:
            wait = super().poll_wait(idle_steps)
        with self._progress:
            if self._due:
                next_due = min(due for due, _ in self._due.values())
                wait = min(wait, max(self.poll_interval, next_due - time.monotonic()))
        return wait

    # -- the policy -------------------------------------------------------------------

    def _read_log(self) -> int:
        """Read the thresholds up to the log's head; returns how many are due now.

        With a ``foreign_delay``, the summaries are read too: a summary that answers
        the threshold another process saved settles it here, so this process does not
        load that conversation to find it done."""
        found = 0
        head = self.head()
        topics: tuple[str, ...] = (events.ThresholdReached.TOPIC,)
        if self.foreign_delay > 0:
            topics += (events.SummaryCreated.TOPIC,)
            self._next_read = time.monotonic() + LOG_READ_INTERVAL
        for page in self.read(after=self._position, stop=head, topics=topics):
            now = time.monotonic()
            with self._progress:
                for notification in page:
                    cid = UUID(str(notification.originator_id))
                    if not self.owns(cid):
                        continue
                    if notification.topic == events.SummaryCreated.TOPIC:
                        self._settle_foreign(cid, notification)
                        continue
                    when = now
                    if self.foreign_delay > 0:
                        if self._was_local(cid, notification.originator_version):
                            # This process's own threshold, taken from its save: its
                            # job is due, in flight or done, and holds the mark below
                            # this id until it is collected (``_note_local``).
                            continue
                        if cid not in self._due or cid in self._foreign:
                            when = now + self.foreign_delay
                            self._foreign[cid] = notification.originator_version
                    # Another process's threshold, not due for a while, does not keep
                    # this thread polling at once: poll_wait wakes it when it falls due.
                    if when <= now:
                        found += 1
                    self._make_due(cid, when, notification.id)
                self._position = page[-1].id
        with self._progress:
            self._position = max(self._position, head)
            self._caught_up_to = self._position
            self._progress.notify_all()
        return found

    def _settle_foreign(self, cid: UUID, notification: Notification) -> None:
        """Drop the wait for another process's threshold once its summary is in the
        log (called under ``_progress``). Any other summary leaves the wait, and the
        check of the conversation when it falls due, as they are."""
        version = self._foreign.get(cid)
        if version is None or cid in self._inflight:
            return
        summary = self.ledger.mapper.to_domain_event(notification)
        if isinstance(summary, events.SummaryCreated) and summary.threshold_version == version:
            del self._foreign[cid]
            self._due.pop(cid, None)

    def _was_local(self, cid: UUID, version: int) -> bool:
        """Whether the threshold at ``version`` was taken from this process's save
        (called under ``_progress``, as the log brings it). A conversation's events
        come in version order, so lower versions not brought yet were read before
        their save's listener ran: they are forgotten."""
        versions = self._local.get(cid)
        if versions is None:
            return False
        local = version in versions
        versions.difference_update([v for v in versions if v <= version])
        if not versions:
            del self._local[cid]
        return local

    def _make_due(self, cid: UUID, when: float, first: int) -> None:
        """``cid`` is due at ``when`` (or earlier, if it already was), and its work
        begins at notification ``first`` (or lower). Called under ``_progress``."""
        due, earliest = self._due.get(cid, (when, first))
        self._due[cid] = (min(due, when), min(earliest, first))

    def _note_local(self, saved: Sequence[Any]) -> None:
        """An event listener: the thresholds of this process's saves."""
        for event in saved:
            if isinstance(event, events.ThresholdReached) and self.owns(event.originator_id):
                with self._progress:
                    cid = event.originator_id
                    self._local.setdefault(cid, set()).add(event.originator_version)
                    # The log has not been read past this threshold unless it was read
                    # since the save, and then it made the threshold due with its id.
                    self._arrived.setdefault(cid, self._position + 1)

    def _take_local(self) -> int:
        """Make the thresholds this process saved since the last step due now; returns
        how many conversations that is. Each job holds the mark at the log position
        of the moment its threshold was saved (its notification id is no lower)."""
        with self._progress:
            arrived, self._arrived = self._arrived, {}
            now = time.monotonic()
            for cid, first in arrived.items():
                self._foreign.pop(cid, None)
                self._make_due(cid, now, first)
            return len(arrived)

    def wait_idle(self, timeout: float | None = 30.0) -> bool:
        with self._progress:
            self._waiters += 1
        try:
            return super().wait_idle(timeout)
        finally:
            with self._progress:
                self._waiters -= 1

    def _collect(self) -> int:
        """Take the outcomes of finished jobs; returns how many finished."""
        collected = 0
        now = time.monotonic()
        with self._progress:
            for cid, (future, first) in list(self._inflight.items()):
                if not future.done():
                    continue
                del self._inflight[cid]
                collected += 1
                if future.cancelled():  # the policy stopped before it ran: still to do
                    self._due[cid] = (now, first)
                    continue
                try:
                    outcome = future.result()
                except LedgerClosedError:  # the ledger closes: the range stays to do
                    outcome = Outcome(recheck=True)
                except ConversationErasedError:  # its content is gone: nothing to summarize
                    continue
                except Exception as exc:  # a bug or an unmapped failure: keep the runner alive
                    log.exception("summarization job for %s crashed: %s", cid, exc)
                    outcome = Outcome(retry_in=self.ledger.settings.retry_base_seconds * 4)
                if outcome.retry_in is not None:
                    self._due[cid] = (now + outcome.retry_in, first)
                elif outcome.recheck:
                    self._due[cid] = (now, first)
            self._progress.notify_all()
        return collected

    def _dispatch(self) -> int:
        if self._executor is None:
            return 0
        started = 0
        now = time.monotonic()
        with self._progress:
            for cid, (due, first) in sorted(self._due.items(), key=lambda kv: kv[1][0]):
                if len(self._inflight) >= self.max_concurrent:
                    break
                if due > now or cid in self._inflight:
                    continue
                try:
                    future = self._executor.submit(self._job, cid, self._foreign.get(cid))
                except BrokenExecutor:
                    raise
                except RuntimeError:
                    # The executor takes no more work: the policy is stopping, or the
                    # interpreter is exiting with the ledger left open (it shuts every
                    # executor down first). The threshold stays in the log for the next
                    # run; the thread ends without a step failing.
                    self._stop.set()
                    break
                del self._due[cid]
                self._foreign.pop(cid, None)
                future.add_done_callback(lambda _f: self.wake())
                self._inflight[cid] = (future, first)
                started += 1
        return started

    def _job(self, cid: UUID, only_threshold: int | None = None) -> Outcome:
        budget = self.ledger.settings.retry_total_seconds
        with self._progress:
            since = self._failing_since.get(cid)
        out_of_time = budget is not None and since is not None and time.monotonic() - since > budget
        try:
            outcome = summarize_pending(
                self.ledger,
                self.summarizer,
                cid,
                backoff=self._backoff,
                out_of_time=out_of_time,
                only_threshold=only_threshold,
            )
        except ConversationErasedError:
            # A fork whose source's subject another process erased lives on as its
            # remainder: the write of the copy this process folded before was refused,
            # the copy is read again below and the remainder's own range summarized at
            # once. A conversation erased whole raises again there: nothing to summarize.
            outcome = Outcome(recheck=True)
        if outcome.recheck and self.ledger.pending_summary(cid) is None:
            outcome = Outcome()
        with self._progress:
            if outcome.retry_in is None:
                self._failing_since.pop(cid, None)
            else:
                self._failing_since.setdefault(cid, time.monotonic())
        return outcome

    def _backoff(self, attempt: int) -> float:
        s = self.ledger.settings
        delay = min(s.retry_max_seconds, s.retry_base_seconds * 2.0 ** max(0, attempt - 1))
        return float(delay * (0.5 + random.random() / 2))

    def _save_mark(self, *, idle: bool = True) -> None:
        """Write the progress row if it moved: at once when ``idle`` (a step that found
        nothing to do, or the policy stopping), else at most every ``MARK_INTERVAL``."""
        with self._progress:
            pending = [first for _, first in self._due.values()]
            pending += [first for _, first in self._inflight.values()]
            mark = min([self._position, *(p - 1 for p in pending)])
        if mark <= self._saved_mark:
            return
        now = time.monotonic()
        if not idle and now - self._saved_at < MARK_INTERVAL:
            return
        with contextlib.suppress(IntegrityError):  # another process moved it first
            self._tracking.insert_tracking(Tracking(self.tracking_name, mark))
        self._saved_mark, self._saved_at = mark, now
