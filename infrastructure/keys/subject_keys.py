"""Per-subject data keys: the foundation of erasure by crypto-shredding.

A **data subject** is whoever content is about (a person, a tenant). A conversation
names its subject (``assign``) before its first record is written, or is its own
subject (its id, as text). Each subject has one random 32-byte **data key**, made on
first use and kept in the store's key table (``key_tables``) wrapped -- AES-GCM
encrypted -- under the **master key** (``Settings.cipher_key``). Every event, snapshot
and read-model value of the subject's conversations is encrypted under its data key
(``subject_mapper``; ``readmodels.sealing`` for read models opened for a ledger; a
value holding several subjects' content under all their keys).

Erasing a subject (``tombstone``) destroys its wrapped key and leaves a tombstone row
(when, why): every record encrypted under the key becomes unreadable wherever a copy
of it lies, and reads of them give ``ErasedEvent`` placeholders. A key that is neither
in the table nor tombstoned is an error (``KeyMissingError``), never taken for an
erasure.

What is where:

- in clear: each record's key id (16 random bytes, telling nothing about the subject),
  the key table's subject names, times and erasure reasons, and the conversation ->
  subject rows (name subjects by opaque ids, not by e-mail addresses);
- under the master key: the data keys (with their key id and subject as associated
  data, so a wrapped key moved to another row does not open);
- under a data key: the content.

Keys are cached in memory (``cache_seconds``, 60 s by default), for reading: a subject
erased by another process stops being readable here within that time, or as soon as
this process learns of the erasure (``forget_subject``, ``refused_write``); erased here,
at once. Writing never trusts the cache: every insert checks the key rows its records
name (``key_fence``), so no write to an erased subject is acknowledged anywhere.
Rotating the master key (``rewrap``) re-wraps every data key; no record is rewritten.

The key table's **check row** (subject ``""``, which no data subject can be) holds a
known token wrapped under the table's current master key (``check_master``): a key
is made, a subject erased or the keys re-wrapped only by a process whose master key
opens it, so a wrong key, or the old one after a rotation, changes nothing
(``ConfigurationError`` naming the store).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from uuid import UUID

from contextledger.domain.values.errors import (
    ConfigurationError,
    ContextLedgerError,
    ConversationErasedError,
    InvalidArgumentError,
    KeyMissingError,
    StoreError,
)
from contextledger.domain.values.validation import check_reason, check_subject
from contextledger.infrastructure.keys.aead import AESGCMCipher, decode_key
from contextledger.infrastructure.keys.key_tables import KeyRow, KeyTable
from contextledger.infrastructure.keys.new_keys import NewKeys, is_deferring, made
from contextledger.infrastructure.keys.wrapping import (
    CHECK_SUBJECT,
    KEY_ID_SIZE,
    MASTER_KEY_SIZE,
    UNWRAPPED,
    DataKey,
    Tombstone,
    master_key_id,
    new_check_row,
    opens,
    wrap_aad,
)

__all__ = [
    "CHECK_SUBJECT",
    "KEY_ID_SIZE",
    "MASTER_KEY_SIZE",
    "UNWRAPPED",
    "DataKey",
    "SubjectKeys",
    "Tombstone",
    "master_key_id",
    "rewrap_keys",
]


class SubjectKeys:
    """The data keys of one store's subjects (see the module doc).

    ``table`` is the store's key table; ``master_key`` the master key (base64 text or
    raw bytes), or None: the data keys are kept unwrapped (``master_id`` ``UNWRAPPED``),
    which makes erasure work on a store without encryption at rest -- destroying a key
    still shreds its records, but whoever reads the key table reads the keys;
    ``clock`` gives erasure times (UTC)."""

    def __init__(
        self,
        table: KeyTable,
        master_key: str | bytes | None,
        *,
        clock: Callable[[], datetime] | None = None,
        cache_seconds: float = 60.0,
    ) -> None:
        self.table = table
        self._master: AESGCMCipher | None = None
        self.master_id = UNWRAPPED
        if master_key is not None:
            raw = decode_key(master_key)
            self._master = AESGCMCipher.from_key(raw)
            self.master_id = master_key_id(raw)
        self._clock = clock or (lambda: datetime.now(UTC))
        self.cache_seconds = cache_seconds
        self._lock = threading.Lock()
        #: key id -> (key or tombstone, expiry); tombstones never expire.
        self._by_id: dict[bytes, tuple[DataKey | Tombstone, float]] = {}
        self._by_subject: dict[str, tuple[DataKey, float]] = {}
        #: The write path: a conversation's key, cached.
        self._by_conversation: dict[UUID, tuple[DataKey, float]] = {}
        self.new_keys = NewKeys()  # keys made for records not stored yet
        #: Counts the erasures this process has learned of (``SubjectMapper.erased_subjects``
        #: looks again when it moves).
        self.erasures_seen = 0

    def __repr__(self) -> str:
        return f"SubjectKeys(table={type(self.table).__name__}, master_id={self.master_id!r})"

    # -- reading and making keys ----------------------------------------------------

    def key_for(self, subject: str) -> DataKey:
        """The subject's data key, made (race-safely) on first use;
        ``ConversationErasedError`` if the subject was erased."""
        hit = self._by_subject.get(subject)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        check_subject(subject)
        new = self.new_keys.of_subject(subject)
        if new is not None and is_deferring():
            return new.key
        row, now = self.table.by_subject(subject) if new is None else None, self._clock()
        if row is None:
            if new is None and is_deferring():  # written with the records (``new_keys``)
                return self.new_keys.make(self.check_master, made(self._master, self.master_id, subject, now))
            self.check_master()  # never a key under a master key the table no longer uses
            new = new or made(self._master, self.master_id, subject, now)
            row = self.table.insert(new.row)
            self.new_keys.take([new.key.key_id])
        entry = self._entry(row)
        if isinstance(entry, Tombstone):
            raise self._erased(entry)
        return entry

    def settle(self, key_ids: Sequence[bytes]) -> None:
        """The new keys of ``key_ids`` are stored: cached as keys read from the table."""
        expires = time.monotonic() + self.cache_seconds
        with self._lock:
            for new in self.new_keys.take(key_ids):
                key, held = new.key, self._by_id.get(new.key.key_id)
                if held is None or not isinstance(held[0], Tombstone):  # not erased here since
                    self._by_id[key.key_id] = self._by_subject[key.subject] = (key, expires)
                    self._by_conversation.update((cid, (key, expires)) for cid in new.conversations)

    def key_by_id(self, key_id: bytes) -> DataKey | Tombstone | None:
        """The key a record names: its data key, its tombstone, or None (not in the table)."""
        hit = self._by_id.get(key_id)
        if hit is not None and (isinstance(hit[0], Tombstone) or hit[1] > time.monotonic()):
            return hit[0]
        row = self.table.by_id(key_id)
        if row is None or (row.wrapped_key is None and row.erased_at is None):
            return None  # not in the table, or its key lost without a tombstone: KeyMissingError
        return self._entry(row)

    def _entry(self, row: KeyRow) -> DataKey | Tombstone:
        """The row unwrapped (or its tombstone), cached. A row without its key and
        without a tombstone is damaged, never an erasure: ``KeyMissingError``."""
        if row.wrapped_key is None and row.erased_at is None:
            raise KeyMissingError(
                f"the data key of subject {row.subject!r} is missing from the key table (its "
                "wrapped key is NULL and no tombstone says it was erased): restore the key table",
                key_id=row.key_id.hex(),
                subject=row.subject,
            )
        if row.erased_at is not None or row.wrapped_key is None:
            tomb = Tombstone(row.key_id, row.subject, row.erased_at or row.created_at, row.erase_reason)
            with self._lock:
                held = self._by_id.get(row.key_id)
                self._by_id[row.key_id] = (tomb, float("inf"))
                self._by_subject.pop(row.subject, None)
                if held is None or not isinstance(held[0], Tombstone):
                    self.erasures_seen += 1
            self._drop_conversations_of(row.subject)
            return tomb
        if row.master_id != self.master_id:
            raise StoreError(
                "cannot decode the store's data keys: they are wrapped under another master key "
                "than the cipher key given (after `contextledger keys rotate`, use the new key: "
                "set CONTEXTLEDGER_CIPHER_KEY, or Settings.cipher_key, to it)",
                cause="wrong_key",
            )
        try:
            raw = (
                row.wrapped_key
                if self._master is None
                else self._master.decrypt(row.wrapped_key, wrap_aad(row.key_id, row.subject))
            )
            cipher = AESGCMCipher.from_key(raw)
        except (ValueError, ConfigurationError) as exc:  # an altered row: no key of AES size
            raise StoreError(
                f"the data key of subject {row.subject!r} does not unwrap (its row was altered)",
                cause="key_damaged",
            ) from exc
        key = DataKey(row.key_id, row.subject, cipher)
        expires = time.monotonic() + self.cache_seconds
        with self._lock:
            self._by_id[row.key_id] = (key, expires)
            self._by_subject[row.subject] = (key, expires)
        return key

    def _erased(self, tomb: Tombstone, conversation_id: UUID | None = None) -> ConversationErasedError:
        return ConversationErasedError(
            f"data subject {tomb.subject!r} was erased: its content can be neither read nor written",
            conversation_id=conversation_id,
            subject=tomb.subject,
            erased_at=tomb.erased_at,
            reason=tomb.reason,
        )

    # -- the master key ---------------------------------------------------------------

    def check_master(self) -> None:
        """``ConfigurationError`` unless this process's master key is the key table's
        current one: the one its check row (``CHECK_SUBJECT``) is wrapped under. A table
        without the row gets it, once this key unwraps a data key the table holds (or
        the table holds none). Asked before a key is made, a subject erased or the keys
        re-wrapped: a wrong key, or the old one after ``keys rotate``, changes nothing."""
        row = self.table.by_subject(CHECK_SUBJECT)
        if row is None:
            row = self._make_check()
        if row.master_id != self.master_id or not opens(self._master, row, check=True):
            raise self._not_current()

    def _make_check(self) -> KeyRow:
        """The check row, made under this master key if it opens the table's keys."""
        held = self.table.wrapped()
        if held and not any(r.master_id == self.master_id and opens(self._master, r) for r in held):
            raise self._not_current()
        return self.table.insert(new_check_row(self._master, self.master_id, self._clock()))

    def _not_current(self) -> ConfigurationError:
        if self._master is None:
            return ConfigurationError(
                f"the store {self.table.where} keeps its data keys wrapped under a master key: "
                "open it with that key (CONTEXTLEDGER_CIPHER_KEY); nothing was changed",
                setting="cipher_key",
                url=self.table.where,
            )
        return ConfigurationError(
            f"the master key (cipher key) is not the current master key of the store {self.table.where}: "
            "its data keys are wrapped under another one, and nothing was changed. Give the "
            "store's master key (CONTEXTLEDGER_CIPHER_KEY); after 'contextledger keys rotate', "
            "restart every process with the new key",
            setting="cipher_key",
            url=self.table.where,
        )

    # -- conversations --------------------------------------------------------------

    def subject_of(self, conversation_id: UUID) -> str:
        """The conversation's subject: the one it names, or its own id."""
        return self.table.subject_of(conversation_id) or str(conversation_id)

    def conversations_of(self, subject: str) -> list[UUID]:
        """The conversations that name ``subject`` (a conversation that is its own
        subject has no row: it is not among them)."""
        return self.table.conversations_of(check_subject(subject))

    def key_for_conversation(self, conversation_id: UUID, *, first: bool = False) -> DataKey:
        """The data key a record of the conversation is written under (cached); its ``first``
        record written with new keys: its own subject's new key, checked by the insert (``new_keys``)."""
        hit = self._by_conversation.get(conversation_id)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        if first and is_deferring() and conversation_id not in self.new_keys.look_up:
            own = made(self._master, self.master_id, str(conversation_id), self._clock(), conversation_id)
            key = self.new_keys.make(self.check_master, own)
        else:
            try:
                key = self.key_for(self.subject_of(conversation_id))
            except ConversationErasedError as exc:
                exc.conversation_id = conversation_id
                raise
        if is_deferring() and (new := self.new_keys.of_id(key.key_id)) is not None:
            new.conversations.add(conversation_id)  # cached once stored (``settle``)
            return key
        with self._lock:
            self._by_conversation[conversation_id] = (key, time.monotonic() + self.cache_seconds)
        return key

    def assign(self, conversation_id: UUID, subject: str) -> None:
        """Name the conversation's subject, before its first record is written (its
        records are then under the subject's key). Naming the same subject again does
        nothing; another one, or one after the conversation wrote under its own key,
        is ``InvalidArgumentError``; an erased subject, ``ConversationErasedError``."""
        check_subject(subject)
        own = str(conversation_id)
        if subject == own:
            return
        self.new_keys.note_named(conversation_id)
        named = self.table.subject_of(conversation_id)
        if named is None:
            if self.table.by_subject(own) is not None:
                raise InvalidArgumentError(
                    "the conversation has records under its own key already: a subject is "
                    "named before its first record",
                    conversation_id=conversation_id,
                    argument="subject",
                )
            row = self.table.by_subject(subject)
            if row is None:
                self.check_master()  # its key is made next: refused before anything is named
            entry = None if row is None else self._entry(row)
            if isinstance(entry, Tombstone):
                raise self._erased(entry, conversation_id)
            named = self.table.assign(conversation_id, subject)
        if named != subject:
            raise InvalidArgumentError(
                f"the conversation belongs to another data subject ({named!r}) already",
                conversation_id=conversation_id,
                argument="subject",
            )
        with self._lock:
            self._by_conversation.pop(conversation_id, None)

    # -- erasure --------------------------------------------------------------------

    def tombstone(self, subject: str, reason: str | None = None) -> Tombstone:
        """Erase ``subject``: destroy its data key, leaving a tombstone (now, ``reason``).
        Erasing again keeps the first tombstone; a subject without a key yet gets one,
        so that no key is ever made for it."""
        check_subject(subject)
        if reason is not None:
            check_reason(reason)
        now = self._clock()
        self.new_keys.drop_subject(subject)
        row = self.table.tombstone(
            KeyRow(
                key_id=os.urandom(KEY_ID_SIZE),
                subject=subject,
                wrapped_key=None,
                master_id="",
                created_at=now,
                erased_at=now,
                erase_reason=reason,
            )
        )
        tomb = Tombstone(row.key_id, row.subject, row.erased_at or now, row.erase_reason)
        with self._lock:
            self._by_id[row.key_id] = (tomb, float("inf"))
            self._by_subject.pop(subject, None)
            self.erasures_seen += 1
        self._drop_conversations_of(subject)
        return tomb

    def tombstone_of(self, subject: str) -> Tombstone | None:
        """The subject's tombstone (None: not erased)."""
        row = self.table.by_subject(check_subject(subject))
        if row is None or not row.erased:
            return None
        entry = self._entry(row)
        return entry if isinstance(entry, Tombstone) else None

    def is_erased(self, subject: str) -> bool:
        return self.tombstone_of(subject) is not None

    def known_erased(self, subject: str) -> bool:
        """Whether ``subject`` is erased, as this process knows it: a key cached here
        counts as live for ``cache_seconds``; else the key table says. A subject
        without a key yet is live (nothing is made for it)."""
        hit = self._by_subject.get(subject)
        if hit is not None and hit[1] > time.monotonic():
            return False
        row = self.table.by_subject(subject)
        return row is not None and isinstance(self._entry(row), Tombstone)

    def refused_write(self, conversation_id: UUID, key_ids: Sequence[bytes]) -> ContextLedgerError:
        """The error of a write the key table refused (``key_fence``): the records named
        ``key_ids`` and one of them is tombstoned (``ConversationErasedError``, and this
        process's caches drop the subject's key) or not in the table at all
        (``KeyMissingError``)."""
        missing = None
        for key_id in key_ids:
            row = self.table.by_id(key_id)
            if row is None:
                missing = missing or key_id
                continue
            if row.erased_at is not None or row.wrapped_key is None:
                entry = self._entry(row)
                assert isinstance(entry, Tombstone)
                self._drop_conversations_of(row.subject)
                return self._erased(entry, conversation_id)
        shown = (missing or (key_ids[0] if key_ids else b"")).hex()
        return KeyMissingError(
            f"a write names data key {shown}, which the store's key table does not hold "
            "(and no tombstone says it was erased): nothing was written",
            conversation_id=conversation_id,
            key_id=shown,
        )

    def forget_subject(self, subject: str) -> None:
        """Drop the subject's cached key (its next use reads the key table): called when
        this process learns that the subject was erased elsewhere."""
        with self._lock:
            self.erasures_seen += 1
            hit = self._by_subject.pop(subject, None)
            if hit is None:
                return
            held = self._by_id.get(hit[0].key_id)
            if held is not None and not isinstance(held[0], Tombstone):
                del self._by_id[hit[0].key_id]
        self._drop_conversations_of(subject)

    def _drop_conversations_of(self, subject: str) -> None:
        with self._lock:
            for cid in [c for c, (k, _) in self._by_conversation.items() if k.subject == subject]:
                del self._by_conversation[cid]

    def forget(self) -> None:
        """Drop every cached key (the next use reads the table)."""
        with self._lock:
            self._by_id = {k: v for k, v in self._by_id.items() if isinstance(v[0], Tombstone)}
            self._by_subject.clear()
            self._by_conversation.clear()

    # -- rotation -------------------------------------------------------------------

    def rewrap(self, old_master: str | bytes, new_master: str | bytes) -> int:
        """Re-wrap every data key wrapped under ``old_master`` with ``new_master`` (the
        records stay as they are); the number re-wrapped. See ``rewrap_keys``."""
        count = rewrap_keys(self.table, old_master, new_master)
        self.forget()
        return count


def rewrap_keys(table: KeyTable, old_master: str | bytes, new_master: str | bytes) -> int:
    """Master-key rotation: every data key of ``table`` wrapped under ``old_master`` is
    unwrapped and wrapped again under ``new_master``, in one transaction, the table's
    check row with them; keys already under ``new_master`` are left alone, so running
    it again re-wraps whatever a process still on the old key wrote meanwhile. Records
    written before per-subject keys (no key header) stay encrypted under the old master
    key itself. ``old_master`` must be the table's current master key and
    ``new_master`` a 32-byte key (``ConfigurationError``, nothing changed). Returns how
    many data keys were re-wrapped."""
    old_raw, new_raw = decode_key(old_master), decode_key(new_master, setting="new_key")
    if len(new_raw) != MASTER_KEY_SIZE:
        raise ConfigurationError(
            f"the new master key holds {len(new_raw)} bytes; a master key made current holds "
            f"{MASTER_KEY_SIZE} (base64 of 32 random bytes)",
            setting="new_key",
        )
    old_id, new_id = master_key_id(old_raw), master_key_id(new_raw)
    old, new = AESGCMCipher.from_key(old_raw), AESGCMCipher.from_key(new_raw)
    check = table.by_subject(CHECK_SUBJECT)
    if check is None or check.master_id != new_id or not opens(new, check, check=True):
        SubjectKeys(table, old_raw).check_master()  # the table's current key, else nothing changes
    count = 0
    for _ in range(3):  # again for keys made under the old key while this ran
        changes = _rewrapped(table, old, old_id, new, new_id)
        if not changes:
            break
        data_keys = sum(1 for row, _, _ in changes if row.subject != CHECK_SUBJECT)
        count += table.replace_wrapped(changes) - (len(changes) - data_keys)
    return max(count, 0)


def _rewrapped(
    table: KeyTable, old: AESGCMCipher, old_id: str, new: AESGCMCipher, new_id: str
) -> list[tuple[KeyRow, bytes, str]]:
    """Each row of ``table`` still under the old master key, wrapped under the new one."""
    changes: list[tuple[KeyRow, bytes, str]] = []
    for row in table.wrapped():
        if row.master_id == new_id or row.wrapped_key is None:
            continue
        if row.master_id != old_id:
            raise ConfigurationError(
                f"the data key of subject {row.subject!r} is wrapped under neither master key",
                setting="cipher_key",
            )
        aad = wrap_aad(row.key_id, row.subject)
        try:
            raw = old.decrypt(row.wrapped_key, aad)
        except ValueError as exc:
            raise StoreError(
                f"the data key of subject {row.subject!r} does not unwrap (its row was altered)",
                cause="key_damaged",
            ) from exc
        changes.append((row, new.encrypt(raw, aad), new_id))
    return changes
