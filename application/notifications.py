"""Reading the application's notification log: the one helper every reader uses.

Followers (summarization, read models), rebuilds and audits read the log through
eventsourcing's ``NotificationLogReader.select``, in pages of up to the ledger's
``log_section_size``, filtered by topic in the database.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from eventsourcing.application import NotificationLog
from eventsourcing.persistence import Notification
from eventsourcing.system import NotificationLogReader

__all__ = ["PAGE", "read_notifications"]

#: Notifications per page (the ledger's ``log_section_size``).
PAGE = 500


def read_notifications(
    log: NotificationLog,
    *,
    after: int = 0,
    stop: int | None = None,
    topics: Sequence[str] = (),
    page: int = PAGE,
) -> Iterator[Sequence[Notification]]:
    """Non-empty pages of notifications with ids above ``after`` and up to ``stop``
    (inclusive; None: the end), of the given ``topics`` (all when empty), oldest first."""
    reader = NotificationLogReader(log, section_size=page)
    yield from reader.select(start=after + 1, stop=stop, topics=topics)
