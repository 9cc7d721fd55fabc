"""Erasure of a data subject's conversations (crypto-shredding): ``Ledger.erase``.

Every event and snapshot of a conversation is encrypted under its data subject's key
(a fork's inherited history under the keys of every subject whose content it holds). Erasing the subject:

1. destroys the key, leaving a tombstone (when, why) in the store's key table: every
   record of the subject is unreadable from then on, wherever a copy lies;
2. appends ``ContentErased`` (``domain/erasure.py``), stored in clear and free of
   content, naming the subject, its conversations, the forks of other subjects whose
   inherited history went with it, the time and the reason: followers see it, and
   the read models delete their rows of those conversations;
3. evicts the conversations from this process's caches and deletes their snapshots.

Before the key goes, the structure of every record it will make unreadable is taken
(``erased_structure.py``) and kept in the ``ContentErased`` record, without content,
for ``verify`` to check the erased part's order, times, ranges and digest chain.

Afterwards reading one of those conversations raises ``ConversationErasedError``
(with ``erased_at`` and ``reason``); followers go past its records (``ErasedEvent``);
``verify`` lists it as erased. A fork of another subject whose inherited history went
with it reads as what is its own (``domain/remainder.py``, ``remainders.py``).
Erasing again returns the first erasure's report with ``already_erased=True``, and so
does the loser of two erasures of one subject at once (one records it). With
several stores, each store's key is destroyed and each gets its record.

The keys are reached through ``SubjectKeyPort`` (the infrastructure's ``SubjectKeys``
satisfies it), the snapshots through an adapter named by topic: the application
imports no infrastructure.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError
from eventsourcing.persistence import IntegrityError

from contextledger.application.following.notifications import read_notifications
from contextledger.application.privacy.erased_structure import erased_structure, take_structure
from contextledger.application.privacy.receipts import ErasureReceipt, ReceiptCheck, check_receipt, receipt_of
from contextledger.application.shared.addressing import ConversationRef, resolve
from contextledger.application.storage.store import store_errors
from contextledger.domain.erasure import ContentErased, ErasedEvent, Erasure
from contextledger.domain.events import Forked
from contextledger.domain.values.errors import (
    ConfigurationError,
    ConversationNotFoundError,
    InvalidArgumentError,
    StoreError,
)
from contextledger.domain.values.validation import MAX_SUBJECT_CHARS, check_reason, check_subject, check_text

__all__ = ["DELETE_SNAPSHOTS_TOPIC", "ErasureReport", "Erasures", "SubjectKeyPort", "TombstoneInfo"]

#: The infrastructure's snapshot deleter (``infrastructure/keys/erasure_store.py``).
DELETE_SNAPSHOTS_TOPIC = "contextledger.infrastructure.keys.erasure_store:delete_snapshots"


@dataclass(frozen=True)
class ErasureReport:
    """What ``Ledger.erase`` erased: the subject, its conversations, when and why.
    ``already_erased``: the subject had been erased before this call (this is that
    erasure's report)."""

    subject: str
    conversations: tuple[UUID, ...]
    erased_at: datetime
    reason: str
    already_erased: bool = False
    #: What the erasure destroyed, content-free, to keep and check later
    #: (``application/privacy/receipts.py``; ``Ledger.check_receipt``).
    receipt: ErasureReceipt | None = None


class TombstoneInfo(Protocol):
    """What is left of an erased subject's key."""

    @property
    def erased_at(self) -> datetime: ...

    @property
    def reason(self) -> str | None: ...

    @property
    def key_id(self) -> bytes: ...


class SubjectKeyPort(Protocol):
    """The data keys of one store's subjects (``infrastructure.keys.subject_keys.SubjectKeys``)."""

    def subject_of(self, conversation_id: UUID) -> str: ...

    def conversations_of(self, subject: str) -> list[UUID]: ...

    def tombstone(self, subject: str, reason: str | None = None) -> TombstoneInfo: ...

    def tombstone_of(self, subject: str) -> TombstoneInfo | None: ...

    def check_master(self) -> None:
        """``ConfigurationError`` unless the master key is the store's current one."""
        ...


def keys_of(shard: Any) -> SubjectKeyPort | None:
    """The store's per-subject keys (None: records are not under per-subject keys)."""
    mapper = getattr(shard, "mapper", None)
    keys = getattr(mapper, "keys", None)
    if keys is None or not getattr(mapper, "per_subject", False):
        return None
    found: SubjectKeyPort = keys
    return found


def _has_records(shard: Any, conversation_id: UUID) -> bool:
    with store_errors(conversation_id):
        return bool(shard.recorder.select_events(conversation_id, limit=1))


class Erasures:
    """``Ledger.erase`` and ``Ledger.subject_of`` over a ledger's stores (``shards``)."""

    def __init__(self, shards: Callable[[], Sequence[Any]], delete_snapshots: Callable[[], Any]) -> None:
        self._shards = shards
        self._delete_snapshots = delete_snapshots

    def subject_of(self, conversation: ConversationRef) -> str:
        cid = resolve(conversation)
        for shard in self._shards():
            keys = keys_of(shard)
            if keys is not None and (subject := keys.subject_of(cid)) != str(cid):
                return subject
            if _has_records(shard, cid):
                return str(cid)
        raise ConversationNotFoundError("no such conversation", conversation_id=cid)

    def target(self, given: str | UUID, *, force: bool = False) -> tuple[str | None, ConversationRef | None]:
        """``erase(target, reason)``'s first argument as ``(subject, conversation)``: a
        ``UUID`` is a conversation; a string is the data subject of that name when a
        store knows the subject, else the conversation it names (an id or a key), else
        (``force``) the subject of that name, unknown yet."""
        if isinstance(given, UUID):
            return None, given
        if not isinstance(given, str) or not given:
            raise InvalidArgumentError(
                "erase's first argument is a data subject or a conversation (an id or a key)",
                argument="subject_or_conversation",
                value=repr(given)[:80],
            )
        check_text(given, "subject_or_conversation")
        if self.knows(given):
            return given, None
        try:
            cid = resolve(given)
        except InvalidArgumentError:
            cid = None
        if cid is not None and any(_has_records(shard, cid) for shard in self._shards()):
            return None, cid
        if force:
            return check_subject(given, "subject_or_conversation"), None
        raise InvalidArgumentError(
            f"no data subject or conversation is named {given!r} (force=True erases the "
            "name anyway, so that no conversation can ever be started under it)",
            argument="subject_or_conversation",
            value=given[:80],
        )

    def knows(self, subject: str) -> bool:
        """Whether a store knows ``subject``: a conversation names it, or it was erased."""
        if len(subject) > MAX_SUBJECT_CHARS or "\x00" in subject or not subject.strip():
            return False
        for shard in self._shards():
            keys = keys_of(shard)
            if keys is not None and (keys.conversations_of(subject) or keys.tombstone_of(subject)):
                return True
        return False

    def erase(
        self,
        subject: str | None,
        conversation: ConversationRef | None,
        reason: str | None,
        *,
        force: bool = False,
    ) -> ErasureReport:
        """Erase one subject (see the module doc). Everything is checked before anything
        changes: the arguments, the master key against every store's key table, and
        that a store knows the subject (a conversation names it, or it is a
        conversation's own id): erasing a name nothing knows (a typo) would block it
        for ever, so it needs ``force`` (to pre-empt a subject)."""
        if (subject is None) == (conversation is None):
            raise InvalidArgumentError(
                "erase takes exactly one of subject= and conversation=", argument="subject"
            )
        if subject is not None:
            check_subject(subject)
        check_reason(reason)
        assert isinstance(reason, str)
        shards = list(self._shards())
        keys = [keys_of(shard) for shard in shards]
        if any(k is None for k in keys):
            raise ConfigurationError(
                "erasure needs records encrypted under per-subject keys (key_scope 'subject', "
                "the default); with key_scope 'store' nothing can be shredded alone",
                setting="key_scope",
            )
        ready = [(shard, k) for shard, k in zip(shards, keys, strict=True) if k is not None]
        for _, k in ready:
            k.check_master()
        if conversation is not None:
            subject = self._subject_of_one(ready, resolve(conversation))
        assert subject is not None
        if not force and not self.knows(subject) and not self._is_conversation(subject):
            raise InvalidArgumentError(
                f"no conversation names data subject {subject!r}, and it was never erased: "
                "nothing was erased (a typo would block the name for ever; force=True, or "
                "--force, erases it anyway, so that no conversation can be started under it)",
                argument="subject",
                value=subject[:80],
            )
        reports = [self._erase_in(shard, k, subject, reason) for shard, k in ready]
        first = reports[0]
        conversations = tuple(dict.fromkeys(c for r in reports for c in r.conversations))
        with store_errors():
            receipt = receipt_of(ready, subject)
        return ErasureReport(
            subject, conversations, first.erased_at, first.reason, first.already_erased, receipt
        )

    def stores(self) -> list[tuple[Any, SubjectKeyPort | None]]:
        """Each store with its per-subject keys (None: it has none)."""
        return [(shard, keys_of(shard)) for shard in self._shards()]

    def check_receipt(self, receipt: ErasureReceipt) -> ReceiptCheck:
        """Check an erasure's receipt against the stores (``receipts.check_receipt``)."""
        shards = list(self._shards())
        with store_errors():
            return check_receipt([(shard, keys_of(shard)) for shard in shards], receipt)

    def _is_conversation(self, subject: str) -> bool:
        """Whether ``subject`` is the id of a conversation that is its own subject."""
        try:
            cid = UUID(subject)
        except ValueError:
            return False
        return any(_has_records(shard, cid) for shard in self._shards())

    def _subject_of_one(self, ready: list[tuple[Any, SubjectKeyPort]], cid: UUID) -> str:
        """The subject ``conversation=`` erases: the conversation's, when the
        conversation is its own subject or the only conversation of it."""
        for shard, keys in ready:
            subject = keys.subject_of(cid)
            if subject == str(cid):
                if not _has_records(shard, cid):
                    continue
                return subject
            others = [c for c in keys.conversations_of(subject) if c != cid]
            if others:
                raise InvalidArgumentError(
                    f"the conversation belongs to data subject {subject!r}, which has "
                    f"{len(others) + 1} conversations: one conversation of several cannot be "
                    f"erased alone (erase subject={subject!r} to erase them all)",
                    conversation_id=cid,
                    argument="conversation",
                )
            return subject
        raise ConversationNotFoundError("no such conversation", conversation_id=cid)

    def _erase_in(self, shard: Any, keys: SubjectKeyPort, subject: str, reason: str) -> ErasureReport:
        """Erase ``subject`` in one store (see the module doc)."""
        found = self._record(shard, subject)
        if found is not None:
            return _report(found, already_erased=True)
        with store_errors():  # while the key is there: the structure verify checks later
            taken = take_structure(shard, self._conversations_of(shard, keys, subject))
        tomb = keys.tombstone(subject, reason)
        conversations = self._conversations_of(shard, keys, subject)
        forks = [f for f in self._forks_of(shard, subject) if f not in conversations]
        with store_errors():
            structure = erased_structure(shard, taken, [*conversations, *forks])
        erasure = Erasure.record_of(
            subject,
            tuple(conversations),
            tuple(forks),
            at=tomb.erased_at,
            reason=tomb.reason or reason,
            structure=structure,
        )
        raced = False
        with store_errors():
            try:
                shard.save(erasure)
            except IntegrityError:  # erased at the same time by another caller
                raced = True
        if raced:
            found = self._record(shard, subject)
            if found is None:
                raise StoreError(
                    f"the erasure of subject {subject!r} conflicted with another write, and no "
                    "record of another erasure is there: erase it again",
                    cause="conflict",
                )
            return _report(found, already_erased=True)
        gone = [*conversations, *forks]
        for cid in gone:
            shard.local_store._cache_evict(cid)
            shard.history_cache.forget(cid)
        self._delete_snapshots()(shard, gone)
        return _report(erasure.record, already_erased=False)  # this call recorded it

    @staticmethod
    def _conversations_of(shard: Any, keys: SubjectKeyPort, subject: str) -> list[UUID]:
        """The subject's conversations (the one whose id it is among them)."""
        conversations = list(keys.conversations_of(subject))
        try:
            own: UUID | None = UUID(subject)
        except ValueError:
            own = None
        if own is not None and own not in conversations and _has_records(shard, own):
            conversations.insert(0, own)
        return conversations

    @staticmethod
    def _record(shard: Any, subject: str) -> ContentErased | None:
        try:
            with store_errors():
                found = shard.repository.get(Erasure.id_for(subject))
        except AggregateNotFoundError:
            return None
        return found.record if isinstance(found, Erasure) else None

    @staticmethod
    def _forks_of(shard: Any, subject: str) -> list[UUID]:
        """Conversations whose inherited history is under ``subject``'s key (their
        ``Forked`` is written under the keys of every subject whose content it holds)."""
        forks: list[UUID] = []
        decode = shard.mapper.to_domain_event
        with store_errors():
            for page in read_notifications(shard.notification_log, topics=(Forked.TOPIC,), committed=True):
                for notification in page:
                    event = decode(notification)
                    if isinstance(event, ErasedEvent) and subject in (event.subject, *event.subjects):
                        forks.append(event.originator_id)
        return forks


def _report(record: ContentErased, *, already_erased: bool) -> ErasureReport:
    return ErasureReport(
        subject=record.subject,
        conversations=record.conversations,
        erased_at=record.timestamp,
        reason=record.reason,
        already_erased=already_erased,
    )
