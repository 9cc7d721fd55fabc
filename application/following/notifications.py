"""Reading the application's notification log: the one helper every reader uses.

Followers (summarization, read models), rebuilds and audits read the log through
the log's ``select``, in pages of up to the ledger's
``log_section_size``, filtered by topic in the database. Bulk readers (read-model
rebuilds and catch-up) ask for larger pages: those go to the recorder's
``select_notifications`` directly, which is what ``select`` calls without its limit.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from eventsourcing.application import NotificationLog
from eventsourcing.persistence import Notification

__all__ = ["PAGE", "committed_top", "read_notifications", "reads_to_a_mark"]

#: Notifications per page (the ledger's ``log_section_size``).
PAGE = 500


def read_notifications(
    log: NotificationLog,
    *,
    after: int = 0,
    stop: int | None = None,
    topics: Sequence[str] = (),
    page: int = PAGE,
    committed: bool = False,
) -> Iterator[Sequence[Notification]]:
    """Non-empty pages of notifications with ids above ``after`` and up to ``stop``
    (inclusive; None: the end), of the given ``topics`` (all when empty), oldest first.

    With a ``stop``, a page shorter than ``page`` (or one that reaches ``stop``) is
    the last: the range is fixed, so the query that would find it empty is not sent.
    Without one, pages are read until one comes back empty, as the log may grow.

    ``committed``: a one-off read of everything committed now, for a store whose
    readers otherwise stop where the log is final (PostgreSQL: an id below may still
    be filled in by an open transaction; a follower must wait for it, a listing need
    not)."""
    recorder: Any = getattr(log, "recorder", None)
    past_mark = committed and reads_to_a_mark(recorder)
    bulk = recorder is not None and page > int(getattr(log, "section_size", page))
    start = after + 1
    while True:
        if past_mark:
            notifications = recorder.select_notifications(start, page, stop, topics, committed=True)
        elif bulk:
            notifications = recorder.select_notifications(start=start, limit=page, stop=stop, topics=topics)
        else:
            notifications = log.select(start=start, limit=page, stop=stop, topics=topics)
        if not notifications:
            return
        yield notifications
        start = notifications[-1].id + 1
        if stop is not None and (len(notifications) < page or start > stop):
            return


def reads_to_a_mark(recorder: Any) -> bool:
    """True for a store whose readers stop where the log is final, which can lie below
    what is committed (the PostgreSQL recorder, with ``max_committed_notification_id``)."""
    return hasattr(recorder, "max_committed_notification_id")


def committed_top(recorder: Any) -> int:
    """The highest notification id committed now (0 while the log is empty)."""
    if reads_to_a_mark(recorder):
        return int(recorder.max_committed_notification_id() or 0)
    return int(recorder.max_notification_id() or 0)
