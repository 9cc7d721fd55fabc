"""The structure of what an erasure makes unreadable, taken while it is still readable.

Before a subject's key is destroyed, ``take_structure`` reads every record of the
subject's conversations, and of the forks that descend from them, and keeps of each
its place, topic, time and the SHA-256 of its stored bytes, and for a link of the
digest chain that commits to content its structure, commitment and digest (a link
written before commitments, or a fork's inherited digest that continues one, keeps
no digest: that would be a hash of the content). After the key is gone,
``erased_structure`` keeps those of the records that now read as erased: they go
into the ``ContentErased`` record (``domain/erasure.py``), in clear, for ``verify``
(``application/auditing/erased.py``) to check the erased part's structure and chain.
"""

from __future__ import annotations

import hashlib
from typing import Any
from uuid import UUID

from contextledger.application.following.notifications import read_notifications
from contextledger.domain.commands.links import CHAINED, structure_of
from contextledger.domain.erasure import ErasedEvent, ErasedLog, ErasedRecord
from contextledger.domain.events import ConversationEvent, Forked, SummaryCreated

__all__ = ["Taken", "erased_structure", "take_structure"]

#: Per conversation, each record's structure by version.
Taken = dict[UUID, dict[int, ErasedRecord]]


def take_structure(shard: Any, conversations: list[UUID]) -> Taken:
    """The structure of every record of ``conversations`` and of the forks descending
    from them, read with the keys still there (see the module doc)."""
    decode = shard.mapper.to_domain_event
    wanted = list(conversations)
    seen = set(wanted)
    for page in read_notifications(shard.notification_log, topics=(Forked.TOPIC,), committed=True):
        for notification in page:
            fork = decode(notification)
            if (
                isinstance(fork, Forked)
                and fork.origin.conversation_id in seen
                and fork.originator_id not in seen
            ):
                seen.add(fork.originator_id)
                wanted.append(fork.originator_id)
    taken: Taken = {}
    #: Per conversation, whether its chain head at each version is a committed link.
    committed: dict[UUID, list[tuple[int, bool]]] = {}
    forks: dict[UUID, Forked] = {}
    for cid in wanted:
        records: dict[int, ErasedRecord] = {}
        heads: list[tuple[int, bool]] = []
        for stored in shard.recorder.select_events(cid):
            event = decode(stored)
            if not isinstance(event, ConversationEvent):
                continue
            records[event.originator_version] = _record_of(event, bytes(stored.state))
            if isinstance(event, CHAINED):
                heads.append((event.originator_version, event.commitment is not None))
            elif isinstance(event, Forked) and event.originator_version == 1:
                forks[cid] = event
                heads.append((1, False))
        taken[cid] = records
        committed[cid] = heads
    for fork in forks.values():  # a source of another subject's, not erased: read it
        source = fork.origin.conversation_id
        if source not in committed:
            events = [decode(stored) for stored in shard.recorder.select_events(source)]
            committed[source] = [
                (e.originator_version, e.commitment is not None) for e in events if isinstance(e, CHAINED)
            ]
    for _ in range(len(forks)):  # a fork of a fork: its source's inherited digest first
        for cid, fork in forks.items():
            source, version = fork.origin.conversation_id, fork.origin.version
            if next((c for v, c in reversed(committed.get(source, [])) if v <= version), False):
                committed[cid][0] = (1, True)
                taken[cid][1] = taken[cid][1].model_copy(update={"digest": fork.digest})
    return taken


def _record_of(event: ConversationEvent, state: bytes) -> ErasedRecord:
    """One record's structure (a fork's inherited digest is added by ``take_structure``
    when it continues a committed link)."""
    fields: dict[str, Any] = {
        "version": event.originator_version,
        "topic": event.TOPIC,
        "timestamp": event.timestamp,
        "stored": hashlib.sha256(state).hexdigest(),
    }
    if isinstance(event, CHAINED):
        fields["structure"] = structure_of(event)
        if event.commitment is not None:
            fields.update(commitment=event.commitment, digest=event.digest)
    elif isinstance(event, SummaryCreated):
        fields["summary"] = (event.covers_from, event.from_position, event.through_position)
    elif isinstance(event, Forked):
        origin = event.origin
        fields.update(
            origin=origin.conversation_id,
            origin_version=origin.version,
            through_position=origin.through_position,
        )
    return ErasedRecord(**fields)


def erased_structure(shard: Any, taken: Taken, erased: list[UUID]) -> tuple[ErasedLog, ...]:
    """Of the records of the conversations taken and of ``erased``, those that read as
    erased now that the key is gone. One written after the structure was taken (a
    writer raced the erasure) keeps only its place, topic and stored bytes' digest."""
    decode = shard.mapper.to_domain_event
    logs: list[ErasedLog] = []
    for cid in dict.fromkeys([*taken, *erased]):
        records = taken.get(cid, {})
        kept = [
            records.get(stored.originator_version)
            or ErasedRecord(
                version=stored.originator_version,
                topic=stored.topic,
                stored=hashlib.sha256(bytes(stored.state)).hexdigest(),
            )
            for stored in shard.recorder.select_events(cid)
            if isinstance(decode(stored), ErasedEvent)
        ]
        if kept:
            logs.append(ErasedLog(conversation_id=cid, records=tuple(kept)))
    return tuple(logs)
