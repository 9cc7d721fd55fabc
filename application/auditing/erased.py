"""What ``verify`` checks of an erased conversation: the structure its erasure recorded.

An erasure keeps, in its ``ContentErased`` record and in clear, the structure of every
record it made unreadable (``ErasedLog``: place, topic, time, the SHA-256 of the
stored bytes, and for a link that commits to content its structure, commitment and
digest). ``check_erased`` holds that against the store and against itself:

- the stored records are the recorded ones: the same versions in the same order, the
  same topics, the same stored bytes (a record deleted, moved, added or altered
  shows);
- each link's structure names its own version and time, and the digest chain holds
  over the recorded commitments (``committed_link``): a commitment, a time, a
  position or a link changed, or records reordered, show;
- the messages' positions follow one another, and each summary's range lies within
  the messages before it.

What it cannot check: anything of the content (it is gone), and a structure rewritten
whole, every digest recomputed: the erasure's receipt (the digest of its record, kept
apart) anchors that. ``inherited_digest`` is where a fork's chain goes on from.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from contextledger.application.shared.results import VerifyProblem
from contextledger.application.storage.store_failures import store_errors
from contextledger.domain.erasure import ContentErased, ErasedEvent, ErasedLog, ErasedRecord, Erasure
from contextledger.domain.events import Forked
from contextledger.domain.values.digests import committed_link
from contextledger.domain.values.errors import ContextLedgerError

__all__ = ["check_erased", "digest_at", "erased_records", "inherited_digest", "recorded_structure"]


def check_erased(
    cid: UUID, stored: Sequence[StoredEvent], log: ErasedLog, *, whole: bool
) -> tuple[list[VerifyProblem], str | None]:
    """Problems of the erased records ``stored`` against ``log`` (``whole``: the
    conversation was erased whole, so its versions run from 1 without a gap), and the
    digest its chain reaches (None: unknown)."""
    problems = _against_store(cid, stored, log)

    def said(version: int, problem: str) -> None:
        problems.append(VerifyProblem(cid, version, problem))

    expected_version = 1
    digest: str | None = None
    next_position: int | None = None
    for record in log.records:
        v = record.version
        if v < expected_version:
            said(v, "the erased records are out of order")
        elif whole and v > expected_version:
            said(v, f"the erased records skip versions {expected_version}-{v - 1}")
        expected_version = v + 1
        if record.timestamp is None:  # written as the erasure went on: its place alone
            digest = next_position = None
            continue
        if record.topic == Forked.TOPIC and v == 1:
            digest = record.digest
            if record.through_position is not None and whole:  # a remainder's own messages are not here
                next_position = record.through_position + 1
            continue
        if record.summary is not None:
            covers, first, last = record.summary
            if not (covers <= first <= last) or (next_position is not None and last >= next_position):
                said(v, f"the erased summary's range ({covers}, {first}-{last}) does not fit the messages")
            continue
        if record.structure is None:
            continue
        kind, version, at, *rest = record.structure.split("|")
        if version != str(v) or at != record.timestamp.isoformat():
            said(v, "the erased record's structure does not name its version and time")
        if kind == "start":
            next_position = 0
        elif kind == "message":
            if next_position is not None and rest and rest[0] != str(next_position):
                said(v, f"the erased message at version {v} does not follow position {next_position - 1}")
            next_position = int(rest[0]) + 1 if rest and rest[0].isdigit() else None
        if record.commitment is None or record.digest is None:
            digest = None  # a link written before commitments: the chain goes on unchecked
            continue
        previous = "" if kind == "start" else digest
        if (
            previous is not None
            and committed_link(previous, record.structure, record.commitment) != record.digest
        ):
            said(v, "the erased record does not match its digest")
        digest = record.digest
    return problems, digest


def digest_at(log: ErasedLog, version: int) -> str | None:
    """The chain's digest at ``version`` as the erased records say (None: unknown)."""
    found = _last_link(log, version)
    return None if found is None else found[1]


def _last_link(log: ErasedLog, version: int) -> tuple[int, str | None] | None:
    """The last erased record at or before ``version`` that carries a link: its
    version and digest (None: none)."""
    found: tuple[int, str | None] | None = None
    for record in log.records:
        if record.version > version:
            break
        if record.structure is not None or record.topic == Forked.TOPIC:
            found = (record.version, record.digest)
    return found


def _link_across_erasure(app: Any, source: UUID, gone: ErasedEvent, version: int) -> str | None:
    """The chain's digest at ``version`` of a conversation erased whole or in part: its
    last link at or before it, read from the record where that is readable and from the
    structure its erasure recorded where not (None: unknown)."""
    try:
        log = recorded_structure(app, gone)
    except ContextLedgerError:  # its own verify reports it
        log = None
    erased = _last_link(log, version) if log is not None else None
    erased_after = False  # an unreadable record after the last readable link
    with store_errors(source):
        stored = app.recorder.select_events(source, lte=version)
    for record in reversed(stored):
        event = app.mapper.to_domain_event(record)
        if isinstance(event, ErasedEvent):
            erased_after = True
        elif hasattr(event, "digest"):
            if erased is not None and erased[0] > record.originator_version:
                return erased[1]
            return None if erased_after and erased is None else str(event.digest)
    return None if erased is None else erased[1]


def _against_store(cid: UUID, stored: Sequence[StoredEvent], log: ErasedLog) -> list[VerifyProblem]:
    """The stored erased records against the recorded ones."""
    problems: list[VerifyProblem] = []
    recorded: dict[int, ErasedRecord] = {r.version: r for r in log.records}
    for event in stored:
        v = event.originator_version
        record = recorded.pop(v, None)
        if record is None:
            problems.append(VerifyProblem(cid, v, "an erased record the erasure did not record"))
        elif record.topic != event.topic or record.stored != hashlib.sha256(bytes(event.state)).hexdigest():
            problems.append(VerifyProblem(cid, v, "the erased record is not the one the erasure recorded"))
    for v in sorted(recorded):
        problems.append(VerifyProblem(cid, v, f"the erased record at version {v} is missing"))
    return problems


def erased_records(app: Any, cid: UUID) -> list[StoredEvent]:
    """The conversation's stored records that read as erased."""
    return [
        s for s in app.recorder.select_events(cid) if isinstance(app.mapper.to_domain_event(s), ErasedEvent)
    ]


def recorded_structure(app: Any, gone: ErasedEvent) -> ErasedLog | None:
    """The structure the erasures of ``gone``'s subjects recorded of its conversation
    (each erasure the records it made unreadable; None: none recorded any)."""
    cid = gone.originator_id
    logs: list[ErasedLog] = []
    for subject in dict.fromkeys((gone.subject, *gone.subjects)):
        found = app.recorder.select_events(Erasure.id_for(subject), limit=1)
        record = app.mapper.to_domain_event(found[0]) if found else None
        log = record.structure_of(cid) if isinstance(record, ContentErased) else None
        if log is not None:
            logs.append(log)
    if len(logs) < 2:
        return logs[0] if logs else None
    records: dict[int, ErasedRecord] = {}
    for log in logs:  # several erasures, each of the records it made unreadable
        for each in log.records:
            records.setdefault(each.version, each)
    return ErasedLog(conversation_id=cid, records=tuple(records[v] for v in sorted(records)))


def inherited_digest(
    store: Any,
    erased_of: Callable[[UUID], ErasedEvent | None],
    app_of: Callable[[UUID], Any],
    stored: Sequence[StoredEvent],
    log: ErasedLog | None,
    *,
    whole: bool = False,
) -> tuple[list[VerifyProblem], str | None]:
    """An erased conversation (``whole``) or a fork's remainder: its erased records
    (``stored``) checked against the structure its erasure recorded (``log``), and a
    fork's inherited digest its chain goes on from (None: unknown), checked against
    its source's at the fork's version (read from ``store``, or from the source's own
    recorded structure if it was erased)."""
    if log is None:
        return [], None
    cid = log.conversation_id
    problems, _ = check_erased(cid, stored, log, whole=whole)
    fork = log.records[0] if log.records and log.records[0].version == 1 else None
    if fork is None or fork.digest is None or fork.origin is None or fork.origin_version is None:
        return problems, None
    source, version = fork.origin, fork.origin_version
    gone = erased_of(source)
    expected: str | None
    try:
        if gone is None:
            events = [e for e in store.events(source) if e.originator_version <= version]
            expected = next((str(e.digest) for e in reversed(events) if hasattr(e, "digest")), None)
        else:  # erased whole, or a fork whose inherited part (or an edit of it) was erased
            expected = _link_across_erasure(app_of(source), source, gone, version)
    except ContextLedgerError:
        expected = None
    if expected is not None and expected != fork.digest:
        problems.append(
            VerifyProblem(cid, 1, "the fork's inherited digest is not its source's at that version")
        )
    return problems, fork.digest
