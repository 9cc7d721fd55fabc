"""Erasure receipts: a content-free, checkable record of one erasure, to keep and show.

``Ledger.erase`` returns an ``ErasureReport`` whose ``receipt`` says what was erased
without saying anything of the content: the subject, its conversations and the forks of
other subjects whose inherited history went with it, each conversation's event count and
version range, the ids of the data keys destroyed (one per store), the time, the reason,
and the SHA-256 digest of the ``ContentErased`` record the erasure appended (the record
is in clear; the digest is over its JSON as stored, with its id and version).

``check_receipt`` checks a receipt against the store later (``Ledger.check_receipt``,
``contextledger verify --receipt FILE``): the erasure is recorded (a ``ContentErased``
record of the subject whose digest is the receipt's), the keys are gone (each store's
key of the subject is a tombstone, with the receipt's key id), and nothing of the
subject is readable (every record of its conversations reads as erased, as many as the
receipt counts, and each fork's inherited part too). It returns a ``ReceiptCheck``
listing what does not hold.

The JSON form (``to_json`` / ``from_json``) is the file ``contextledger erase --json``
writes; its ``format`` is ``contextledger-erasure-receipt/1``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from contextledger.domain.erasure import ContentErased, ErasedEvent, Erasure
from contextledger.domain.values.errors import InvalidArgumentError

__all__ = [
    "RECEIPT_FORMAT",
    "ErasedRange",
    "ErasureReceipt",
    "ReceiptCheck",
    "check_receipt",
    "receipt_of",
    "record_digest",
]

RECEIPT_FORMAT = "contextledger-erasure-receipt/1"


def record_digest(record: ContentErased) -> str:
    """The SHA-256 (hex) of an erasure's record: its id, version and JSON as stored."""
    body = record.model_dump_json(exclude={"originator_id", "originator_version"})
    data = f"{record.originator_id}:{record.originator_version}:{body}".encode()
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ErasedRange:
    """One erased conversation's records: how many, and their versions (inclusive)."""

    conversation_id: UUID
    events: int
    first_version: int
    last_version: int


@dataclass(frozen=True)
class ErasureReceipt:
    """What one erasure destroyed, without any of the content (see the module doc)."""

    subject: str
    conversations: tuple[UUID, ...]
    forks: tuple[UUID, ...]
    ranges: tuple[ErasedRange, ...]
    #: The destroyed data keys' ids (hex), one per store that held the subject's key.
    key_ids: tuple[str, ...]
    erased_at: datetime
    reason: str
    #: The id of the subject's ``ContentErased`` record, and its digest (``record_digest``).
    record_id: UUID
    record_digest: str

    @property
    def events(self) -> int:
        """How many records the erasure made unreadable."""
        return sum(r.events for r in self.ranges)

    def to_json(self) -> dict[str, Any]:
        """The receipt as JSON values (``from_json`` reads it back)."""
        return {
            "format": RECEIPT_FORMAT,
            "subject": self.subject,
            "conversations": [str(c) for c in self.conversations],
            "forks": [str(c) for c in self.forks],
            "ranges": [
                {
                    "conversation_id": str(r.conversation_id),
                    "events": r.events,
                    "first_version": r.first_version,
                    "last_version": r.last_version,
                }
                for r in self.ranges
            ],
            "key_ids": list(self.key_ids),
            "erased_at": self.erased_at.isoformat(),
            "reason": self.reason,
            "record_id": str(self.record_id),
            "record_digest": self.record_digest,
        }

    @classmethod
    def from_json(cls, data: Any) -> ErasureReceipt:
        """A receipt read from its JSON form; ``InvalidArgumentError`` if it is not one."""
        try:
            if not isinstance(data, dict) or data.get("format") != RECEIPT_FORMAT:
                raise ValueError(f"its format is not {RECEIPT_FORMAT!r}")
            return cls(
                subject=str(data["subject"]),
                conversations=tuple(UUID(c) for c in data["conversations"]),
                forks=tuple(UUID(c) for c in data["forks"]),
                ranges=tuple(
                    ErasedRange(
                        UUID(r["conversation_id"]),
                        int(r["events"]),
                        int(r["first_version"]),
                        int(r["last_version"]),
                    )
                    for r in data["ranges"]
                ),
                key_ids=tuple(str(k) for k in data["key_ids"]),
                erased_at=datetime.fromisoformat(data["erased_at"]),
                reason=str(data["reason"]),
                record_id=UUID(data["record_id"]),
                record_digest=str(data["record_digest"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InvalidArgumentError(
                f"not an erasure receipt: {exc}", argument="receipt", value=repr(data)[:80]
            ) from exc


@dataclass(frozen=True)
class ReceiptCheck:
    """What ``check_receipt`` found: ``ok`` when every check held."""

    receipt: ErasureReceipt
    problems: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.problems


class _Tombstone(Protocol):
    @property
    def key_id(self) -> bytes: ...


class _Keys(Protocol):
    def tombstone_of(self, subject: str) -> _Tombstone | None: ...


def ranges_of(shard: Any, conversations: Sequence[UUID]) -> list[ErasedRange]:
    """Each conversation's records in ``shard`` (an eventsourcing application): count
    and versions (a conversation's versions run from 1 without a gap)."""
    found = []
    for cid in conversations:
        last = shard.recorder.select_events(cid, desc=True, limit=1)
        if last:
            top = last[0].originator_version
            found.append(ErasedRange(cid, top, 1, top))
    return found


def receipt_of(shards: Sequence[tuple[Any, _Keys]], subject: str) -> ErasureReceipt | None:
    """The receipt of ``subject``'s erasure as the stores record it (None: not erased)."""
    records: list[ContentErased] = []
    ranges: list[ErasedRange] = []
    key_ids: list[str] = []
    for shard, keys in shards:
        record = _record(shard, subject)
        tomb = keys.tombstone_of(subject)
        if record is None or tomb is None:
            continue
        records.append(record)
        key_ids.append(tomb.key_id.hex())
        ranges.extend(ranges_of(shard, record.erased))
    if not records:
        return None
    first = records[0]
    return ErasureReceipt(
        subject=subject,
        conversations=tuple(dict.fromkeys(c for r in records for c in r.conversations)),
        forks=tuple(dict.fromkeys(c for r in records for c in r.forks)),
        ranges=tuple(ranges),
        key_ids=tuple(key_ids),
        erased_at=first.timestamp,
        reason=first.reason,
        record_id=first.originator_id,
        record_digest=record_digest(first),
    )


def check_receipt(shards: Sequence[tuple[Any, _Keys | None]], receipt: ErasureReceipt) -> ReceiptCheck:
    """Check ``receipt`` against the stores (each an eventsourcing application with its
    per-subject keys): see the module doc."""
    problems: list[str] = []
    subject = receipt.subject
    if receipt.record_id != Erasure.id_for(subject):
        problems.append(f"the receipt's record id is not the erasure record of subject {subject!r}")
    records = [_record(shard, subject) for shard, _ in shards]
    digests = {record_digest(r) for r in records if r is not None}
    if not digests:
        problems.append(f"no erasure of subject {subject!r} is recorded in the store")
    elif receipt.record_digest not in digests:
        problems.append("the store's erasure record of the subject does not match the receipt's digest")
    tombstones = set()
    for _, keys in shards:
        tomb = None if keys is None else keys.tombstone_of(subject)
        if tomb is not None:
            tombstones.add(tomb.key_id.hex())
    if not tombstones:
        problems.append(f"subject {subject!r} has no tombstone: its key is not recorded as destroyed")
    for key_id in receipt.key_ids:
        if key_id not in tombstones:
            problems.append(f"data key {key_id} is not a tombstone of subject {subject!r}")
    for conversation in receipt.ranges:
        problems.extend(_unreadable(shards, receipt, conversation))
    return ReceiptCheck(receipt, tuple(problems))


def _record(shard: Any, subject: str) -> ContentErased | None:
    from eventsourcing.application import AggregateNotFoundError

    try:
        found = shard.repository.get(Erasure.id_for(subject))
    except AggregateNotFoundError:
        return None
    return found.record if isinstance(found, Erasure) else None


def _unreadable(shards: Sequence[tuple[Any, Any]], receipt: ErasureReceipt, erased: ErasedRange) -> list[str]:
    """What of one conversation of the receipt is still readable, or not as counted."""
    cid = erased.conversation_id
    stored = [e for shard, _ in shards for e in shard.recorder.select_events(cid)]
    holder = next((shard for shard, _ in shards if shard.recorder.select_events(cid, limit=1)), None)
    if holder is None:
        return [f"conversation {cid}: no record of it is in the store"]
    events = [holder.mapper.to_domain_event(e) for e in stored]
    if cid in receipt.forks:  # its inherited part (its first record) is the subject's
        first = events[0]
        if not (isinstance(first, ErasedEvent) and receipt.subject in (first.subject, *first.subjects)):
            return [f"fork {cid}: its inherited history is readable"]
        return []
    problems = []
    readable = [e.originator_version for e in events if not isinstance(e, ErasedEvent)]
    if readable:
        problems.append(
            f"conversation {cid}: {len(readable)} records are readable (from version {readable[0]})"
        )
    versions = [e.originator_version for e in stored]
    if len(stored) != erased.events or (
        versions
        and (versions[0], versions[-1])
        != (
            erased.first_version,
            erased.last_version,
        )
    ):
        problems.append(
            f"conversation {cid}: {len(stored)} records in the store, the receipt counts "
            f"{erased.events} (versions {erased.first_version}-{erased.last_version})"
        )
    return problems
