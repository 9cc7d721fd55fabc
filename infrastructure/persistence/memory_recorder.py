"""The in-memory store's recorder (``memory://``): reads in time proportional to the
events read.

eventsourcing's in-memory recorder answers "the events of an aggregate after version
``gt``" by scanning every version of it; ``WindowedPOPORecorder`` walks up from
``gt + 1`` instead, so bringing a cached conversation up to date costs what it reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import ApplicationRecorder, StoredEvent
from eventsourcing.popo import POPOApplicationRecorder, POPOFactory

from contextledger.infrastructure.keys.key_factory import SubjectKeysFactory
from contextledger.infrastructure.keys.key_fence import KeyFence

__all__ = ["MemoryFactory", "WindowedPOPORecorder"]


class WindowedPOPORecorder(POPOApplicationRecorder):
    """The in-memory recorder, reading ``gt=`` ranges by version instead of scanning;
    a save naming an erased data key stores nothing (``key_fence``)."""

    #: The write fence of the store's key table (set by ``SubjectKeysFactory``).
    fence: KeyFence | None = None

    def _insert_events(self, stored_events: Sequence[StoredEvent], **kwargs: Any) -> Sequence[int] | None:
        with self._database_lock:
            fence = self.fence
            if fence is not None and not all(fence.live(k) for k in fence.named(stored_events)):
                raise fence.error(stored_events)
            inserted: Sequence[int] | None = super()._insert_events(stored_events, **kwargs)
            return inserted

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        if gt is None or desc:
            return super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
        with self._database_lock:
            index = self._stored_events_index.get(str(originator_id))
            if not index:
                return []
            results: list[StoredEvent] = []
            version = gt + 1
            # Versions of one aggregate are consecutive: walk up from gt + 1.
            while version in index and (lte is None or version <= lte):
                results.append(self._stored_events[index[version]])
                if len(results) == limit:
                    break
                version += 1
            if not results and gt > 0 and gt not in index:  # not a version of it: scan
                return super().select_events(originator_id, gt=gt, lte=lte, desc=desc, limit=limit)
            return results


class MemoryFactory(SubjectKeysFactory, POPOFactory):
    """eventsourcing's in-memory factory with ``WindowedPOPORecorder`` (and subject keys)."""

    def application_recorder(self) -> ApplicationRecorder:
        return WindowedPOPORecorder()
