"""Whose content a conversation's records carry: what ``subject_mapper`` needs to know
to encrypt a record under every key of the subjects whose content it holds.

A conversation's own content belongs to its subject. A fork's first record (``Forked``)
holds what the fork inherits: its source's content and whatever the source itself
inherited, so it names (in its header) the keys of all those subjects with the fork's
own. A conversation **inherits** the subjects its first record names other than its
own; from its first record, too, comes the last position it shares with its source.

``Lineage.subjects_of_record`` gives the subjects a record about to be written goes
under, or None for its conversation's subject alone:

- a ``Forked``: its source's subjects (the source's own and what it inherited) and the
  fork's (one subject: a fork of its source's subject inheriting nothing else);
- in a conversation that inherits: a ``SummaryCreated`` whose window reaches back into
  the inherited part (``covers_from`` at or before the fork's last shared position), a
  ``SummaryInvalidated`` reaching back into it (it carries restored summaries and
  reopened messages: one that carries only the fork's own, or none, does not), a
  ``NativeSummaryReadable`` whose summary's range reaches back into it, and a snapshot
  (the whole state): its own subject and the inherited ones;
- anything else: None.

Once the inherited part is erased, the fork's first record no longer tells the last
position it shares: the position before its first own message stands for it
(``first_own_position``), so that what the fork writes of its own part afterwards --
the summaries and invalidations of its remainder (``domain/remainder.py``) -- goes
under its own key; what reaches back still names the erased key, and is refused.

What a conversation inherits never changes once its first record is written, so it is
cached (bounded) for the process's life.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from contextledger.domain.conversation import ConversationSnapshot
from contextledger.domain.erasure import ErasedEvent
from contextledger.domain.events import Forked, NativeSummaryReadable, SummaryCreated, SummaryInvalidated
from contextledger.infrastructure.keys.subject_keys import SubjectKeys

__all__ = ["FirstRecord", "Inherited", "Lineage"]

#: A conversation's first record as ``Lineage`` needs it: its topic, the key ids its
#: header names (empty: none), and the record decoded (an ``ErasedEvent`` once erased).
FirstRecord = tuple[str, Sequence[bytes], Any]
_CACHE_LIMIT = 4096


@dataclass(frozen=True)
class Inherited:
    """What a conversation inherits from other subjects: their names, and the last
    position it shares with its source (every position when that is unknown)."""

    subjects: tuple[str, ...]
    through_position: int


class Lineage:
    """The subjects each record goes under (see the module doc). ``first_record`` reads
    a conversation's first stored record (None: the conversation has none yet)."""

    def __init__(
        self,
        keys: SubjectKeys,
        first_record: Callable[[UUID], FirstRecord | None],
        first_own_position: Callable[[UUID], int | None] | None = None,
    ) -> None:
        self._keys = keys
        self._first_record = first_record
        self._first_own_position = first_own_position
        self._lock = threading.Lock()
        self._cache: dict[UUID, Inherited | None] = {}

    def subjects_of_record(self, event: Any) -> tuple[str, ...] | None:
        """The subjects whose keys ``event`` is written under; None: its conversation's."""
        if isinstance(event, Forked):
            own = self._keys.subject_of(event.originator_id)
            return tuple(dict.fromkeys((*self.content_subjects(event.origin.conversation_id), own)))
        if not isinstance(
            event, (SummaryCreated, SummaryInvalidated, NativeSummaryReadable, ConversationSnapshot)
        ):
            return None
        inherited = self.inherited(event.originator_id)
        if inherited is None:
            return None
        if isinstance(event, SummaryCreated) and event.covers_from > inherited.through_position:
            return None
        if isinstance(event, NativeSummaryReadable) and event.from_position > inherited.through_position:
            return None
        if isinstance(event, SummaryInvalidated) and _own_only(event, inherited.through_position):
            return None
        return (self._keys.subject_of(event.originator_id), *inherited.subjects)

    def content_subjects(self, conversation_id: UUID) -> tuple[str, ...]:
        """Every subject whose content the conversation holds: its own first."""
        inherited = self.inherited(conversation_id)
        own = self._keys.subject_of(conversation_id)
        return (own, *(inherited.subjects if inherited is not None else ()))

    def inherited(self, conversation_id: UUID) -> Inherited | None:
        """What the conversation inherits from other subjects (None: nothing)."""
        with self._lock:
            if conversation_id in self._cache:
                return self._cache[conversation_id]
        first = self._first_record(conversation_id)
        if first is None:
            return None
        topic, key_ids, event = first
        found: Inherited | None = None
        if topic == Forked.TOPIC and key_ids:
            own = self._keys.subject_of(conversation_id)
            named = (self._keys.key_by_id(key_id) for key_id in key_ids)
            subjects = tuple(dict.fromkeys(k.subject for k in named if k is not None and k.subject != own))
            if subjects:
                through = event.origin.through_position if isinstance(event, Forked) else sys.maxsize
                if isinstance(event, ErasedEvent) and self._first_own_position is not None:
                    position = self._first_own_position(conversation_id)
                    if position is None:  # none yet: look again next time
                        return Inherited(subjects, through)
                    through = position - 1
                found = Inherited(subjects, through)
        with self._lock:
            if len(self._cache) >= _CACHE_LIMIT:
                self._cache.clear()
            self._cache[conversation_id] = found
        return found


def _own_only(event: SummaryInvalidated, through_position: int) -> bool:
    """Whether an invalidation carries only what the fork wrote after its shared
    history: no inherited summary, and restored layers and reopened messages past it."""
    if event.invalidated_inherited:
        return False
    starts = [e.position for e in event.reopened]
    for layer in event.layers:
        starts.append(layer.from_position)
        starts.extend(link.from_position for link in layer.chain)
    return all(p > through_position for p in starts)
