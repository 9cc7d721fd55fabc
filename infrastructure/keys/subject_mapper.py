"""Events and snapshots encrypted under their conversation's data-subject key.

``SubjectMapper`` is ``PydanticMapper`` with per-subject keys (``subject_keys``). The
mapper is the one place where an aggregate's id, its version and the state's bytes
meet, and snapshots go through it too, so each record is encrypted under the key of
the conversation's subject. A stored record's ``state`` is::

    b"CLK\\x01" | key id (16 bytes) | nonce (12) | tag (16) | ciphertext

- in clear: the 4-byte format mark and the key id (random: it names the key, not the
  subject), beside the columns that were always in clear (conversation id, version,
  topic);
- encrypted (AES-GCM under the subject's data key): the state, compressed first when
  compression is on; the format mark, key id, conversation id and version are
  associated data, so a record copied to another place, or given another key id,
  does not decrypt.

Reading needs no conversation -> subject mapping: the key id names the key. A record
without the mark -- everything written before per-subject keys, or with
``key_scope="store"`` -- is eventsourcing's ``AESCipher`` layout under the master key,
read as before (one random in 2**32 of those starts with the mark by chance; its key
id then names no key, and it is read with the master key).

A record that carries the content of several subjects is encrypted under all their
keys (format 2)::

    b"CLK\\x02" | n (1 byte) | n key ids | nonce | tag | (... nonce | tag | ciphertext)

the state encrypted under the first key, that under the second, and so on (the whole
header, conversation id and version as associated data at every layer): reading needs
every key, and a tombstone of any of them makes the record an ``ErasedEvent``. Those
records (``lineage.py`` decides which) are a fork's first record (``Forked``, the
history it inherits) when its content belongs to a subject other than the fork's --
the subjects of the source and of what the source itself inherited, with the fork's
own --, and, in a conversation that inherited another subject's content, a summary
whose window reaches back into the inherited part, a summary invalidation and a
snapshot. Every other record is format 1 under its conversation's subject's key (a
fork of its source's subject, inheriting nothing else, included).

``ContentErased``, the record of an erasure (no content), is stored in clear:
``b"CLC\x01"`` and its JSON, readable after the key is gone.

A record whose key is tombstoned reads as an ``ErasedEvent`` (never an error: a
follower reading a batch must go past it); a key id the table lacks, with no
tombstone, is ``KeyMissingError``. Writing a record of an erased subject is
``ConversationErasedError``.

``key_factory.SubjectKeysFactory``, mixed into the store factories (SQLite, PostgreSQL,
memory), gives the mapper it builds the store's key table (created with the event
tables, or in the key store: ``key_store``).
``Settings.key_scope`` (``CL_KEY_SCOPE``) chooses what new records are written under:
``subject`` (the default) or ``store`` (the master key, as before); both read both.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import StoredEvent

from contextledger.domain.erasure import ContentErased, ErasedEvent
from contextledger.domain.events import MessageAppended
from contextledger.domain.values.errors import (
    ConversationErasedError,
    KeyMissingError,
    LogDamagedError,
    StoreError,
)
from contextledger.infrastructure.keys.aead import OVERHEAD
from contextledger.infrastructure.keys.lineage import FirstRecord, Lineage
from contextledger.infrastructure.keys.mapper import PydanticMapper, describe
from contextledger.infrastructure.keys.subject_keys import KEY_ID_SIZE, DataKey, SubjectKeys, Tombstone

__all__ = [
    "KEY_SCOPE",
    "MARK",
    "SUBJECT_MAPPER_TOPIC",
    "SubjectMapper",
    "erased_subjects_of",
    "subject_keys_of",
]

SUBJECT_MAPPER_TOPIC = "contextledger.infrastructure.keys.subject_mapper:SubjectMapper"
#: The environment key of ``Settings.key_scope``.
KEY_SCOPE = "CL_KEY_SCOPE"
#: The first bytes of a record encrypted under a data key (format 1).
MARK = b"CLK\x01"
#: The first bytes of a record encrypted under several data keys (format 2).
MULTI_MARK = b"CLK\x02"
#: The most keys a format-2 record names.
MAX_KEYS = 255
#: The first bytes of a record stored in clear (an erasure's record).
CLEAR_MARK = b"CLC\x01"
_HEADER = len(MARK) + KEY_ID_SIZE
#: The shortest record under one data key: its header, a nonce and a tag.
_MIN_SEALED = _HEADER + OVERHEAD
_MARK_SIZE = len(MARK)
#: Records read at a time looking for a fork's first own message.
_PAGE = 100
#: Conversations whose erased subjects are remembered (``erased_subjects``) at most.
_LIVE_LIMIT = 65536
#: The subjects whose keys the record being written goes under, when they are not
#: its conversation's subject alone (see ``lineage.py``).
_SUBJECTS: ContextVar[tuple[str, ...] | None] = ContextVar("contextledger_record_subjects", default=None)
_Named = tuple[int, list[bytes], list[DataKey | Tombstone | None]]  # ``_named_keys``


def _id_bytes(originator_id: UUID | str) -> bytes:
    oid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
    return oid.bytes


def _version_bytes(version: int) -> bytes:
    return version.to_bytes(8, "big", signed=True)


def _record_aad(header: bytes, originator_id: UUID | str, version: int) -> bytes:
    """The associated data a record is sealed with: its clear header, its
    conversation's id and its version."""
    return header + _id_bytes(originator_id) + _version_bytes(version)


class SubjectMapper(PydanticMapper):
    """``PydanticMapper`` encrypting each record under its subject's key (module doc).
    Without keys (``use_keys`` not called) it is ``PydanticMapper`` with the master key."""

    keys: SubjectKeys | None = None
    #: The last record's originator id and its 16 bytes (``to_domain_event``).
    _oid_bytes: tuple[Any, bytes] = (None, b"")
    #: Whether new records are written under subject keys (else the master key).
    per_subject: bool = False
    #: The store's event recorder (set by ``SubjectKeysFactory``): where ``lineage``
    #: reads conversations' first records.
    recorder: Any = None
    _lineage: Lineage | None = None

    def use_keys(self, keys: SubjectKeys, *, per_subject: bool = True) -> None:
        self.keys = keys
        self.per_subject = per_subject
        #: conversation -> (when its subjects were last looked at, the erasures seen
        #: then, the erased ones among them): ``erased_subjects``.
        self._live: dict[UUID, tuple[float, int, tuple[str, ...]]] = {}

    def erased_subjects(self, conversation_id: UUID) -> tuple[str, ...]:
        """The erased subjects among those whose content the conversation holds (its
        own, and those it inherits as a fork), as this process knows them. The answer
        stands for the keys' ``cache_seconds``, unless this process learns of an
        erasure meanwhile (it erased, decoded a ``ContentErased``, or had a write
        refused): a conversation cached in another process is read at most that long
        after its subject's erasure."""
        keys = self.keys
        if keys is None or not self.per_subject:
            return ()
        now = time.monotonic()
        seen = keys.erasures_seen
        hit = self._live.get(conversation_id)
        if hit is not None and hit[0] + keys.cache_seconds > now and hit[1] == seen:
            return hit[2]
        subjects = self.lineage.content_subjects(conversation_id)
        erased = tuple(s for s in subjects if keys.known_erased(s))
        if len(self._live) > _LIVE_LIMIT:
            self._live.clear()
        self._live[conversation_id] = (now, seen, erased)
        return erased

    def learn_erasures(self, conversation_id: UUID) -> tuple[str, ...]:
        """The subjects whose content the conversation holds, looked up in the key table
        itself (one row read per subject, whatever is cached): those found erased that
        this process did not know of (``SubjectKeys.tombstone_of`` learns them, so its
        next read of the conversation raises or gives the remainder). What is checked
        before content leaves the process for a summarizer."""
        keys = self.keys
        if keys is None or not self.per_subject:
            return ()
        seen = keys.erasures_seen
        erased = tuple(s for s in self.lineage.content_subjects(conversation_id) if keys.is_erased(s))
        return erased if keys.erasures_seen != seen else ()

    def encrypts(self) -> bool:
        return self.cipher is not None or (self.keys is not None and self.per_subject)

    def decrypts(self) -> bool:
        return self.cipher is not None or self.keys is not None

    # -- writing ----------------------------------------------------------------------

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        if isinstance(domain_event, ErasedEvent):
            raise domain_event.error()
        if isinstance(domain_event, ContentErased):
            data = domain_event.model_dump_json(exclude={"originator_id", "originator_version"})
            return StoredEvent(
                originator_id=domain_event.originator_id,
                originator_version=domain_event.originator_version,
                topic=ContentErased.TOPIC,
                state=CLEAR_MARK + data.encode("utf-8"),
            )
        subjects = None
        if self.keys is not None and self.per_subject:
            subjects = self.lineage.subjects_of_record(domain_event)
        if subjects is None:
            return super().to_stored_event(domain_event)
        token = _SUBJECTS.set(subjects)
        try:
            return super().to_stored_event(domain_event)
        finally:
            _SUBJECTS.reset(token)

    @property
    def lineage(self) -> Lineage:
        """Whose content each conversation carries (built on first use)."""
        found = self._lineage
        if found is None:
            assert self.keys is not None
            found = self._lineage = Lineage(self.keys, self._first_record, self._first_own_position)
        return found

    def _first_record(self, conversation_id: UUID) -> FirstRecord | None:
        """The conversation's first stored record as ``Lineage`` reads it (None: no
        record, or no recorder known yet)."""
        if self.recorder is None:
            return None
        found = self.recorder.select_events(conversation_id, lte=1, limit=1)
        if not found:
            return None
        stored = found[0]
        return stored.topic, key_ids_of(bytes(stored.state)) or (), self.to_domain_event(stored)

    def _first_own_position(self, conversation_id: UUID) -> int | None:
        """The position of the first message the conversation appended itself (None:
        none readable yet): read for a fork whose first record was erased."""
        if self.recorder is None:
            return None
        after = 1
        while True:
            page = self.recorder.select_events(conversation_id, gt=after, limit=_PAGE)
            if not page:
                return None
            for stored in page:
                if stored.topic == MessageAppended.TOPIC:
                    event = self.to_domain_event(stored)
                    if isinstance(event, MessageAppended):
                        return event.position
            after = page[-1].originator_version

    def encrypt_state(self, originator_id: UUID, originator_version: int, data: bytes) -> bytes:
        if self.keys is None or not self.per_subject:  # then there is a cipher (``encrypts``)
            return super().encrypt_state(originator_id, originator_version, data)
        subjects = _SUBJECTS.get()
        try:
            if subjects is None:
                keys = [self.keys.key_for_conversation(originator_id, first=originator_version == 1)]
            else:
                keys = [self.keys.key_for(subject) for subject in subjects]
        except ConversationErasedError as exc:
            exc.conversation_id = (
                originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
            )
            raise
        if len(keys) == 1:
            header = MARK + keys[0].key_id
            return header + keys[0].cipher.encrypt(
                data, _record_aad(header, originator_id, originator_version)
            )
        if len(keys) > MAX_KEYS:
            raise StoreError(f"a record can name at most {MAX_KEYS} data keys, not {len(keys)}")
        header = MULTI_MARK + bytes([len(keys)]) + b"".join(k.key_id for k in keys)
        aad = _record_aad(header, originator_id, originator_version)
        for key in keys:
            data = key.cipher.encrypt(data, aad)
        return header + data

    # -- reading ----------------------------------------------------------------------

    def _named_keys(self, state: bytes) -> _Named | None:
        """The header's size of a record under data keys, the key ids it names and their
        keys (None where the table lacks one); None: no such header."""
        ids = None if self.keys is None else key_ids_of(state)
        if ids is None or self.keys is None:
            return None
        size = _HEADER if state[: len(MARK)] == MARK else len(MULTI_MARK) + 1 + KEY_ID_SIZE * len(ids)
        return size, ids, [self.keys.key_by_id(key_id) for key_id in ids]

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        state, keys = stored_event.state, self.keys
        if keys is not None and type(state) is bytes and state.startswith(MARK) and len(state) >= _MIN_SEALED:
            # The usual record, under one data key, decrypted at once; anything else
            # (a tombstone, a missing key, a record that does not decrypt) the general way.
            key = keys.key_by_id(state[_MARK_SIZE:_HEADER])
            if type(key) is DataKey:
                oid, memo = stored_event.originator_id, self._oid_bytes
                if memo[0] is not oid:  # a conversation's records share one id object
                    memo = self._oid_bytes = (oid, _id_bytes(oid))
                aad = state[:_HEADER] + memo[1] + _version_bytes(stored_event.originator_version)
                try:
                    data = key.cipher.decrypt_from(state, _HEADER, aad)
                except ValueError:
                    pass
                else:
                    return self.decode_state(stored_event, data)
        if stored_event.topic == ContentErased.TOPIC and bytes(stored_event.state[:4]) == CLEAR_MARK:
            record = _clear_record(stored_event)
            if self.keys is not None:  # erased here or elsewhere: no cached key outlives it
                self.keys.forget_subject(record.subject)
            return record
        named = None if self.keys is None else self._named_keys(bytes(stored_event.state))
        if named is not None:  # its keys looked up once: a tombstone, or they decrypt it
            tombs = [k for k in named[2] if isinstance(k, Tombstone)]
            if tombs:
                return _erased(stored_event, tombs)
        elif self.cipher is None:  # in clear: written without a cipher before per-subject keys
            return self.decode_state(stored_event, bytes(stored_event.state))
        return self.decode_state(stored_event, self.decrypt_state(stored_event, named))

    def decrypt_state(self, stored_event: StoredEvent, named: _Named | bool | None = True) -> bytes:
        """The state decrypted; ``named``: its keys as ``_named_keys`` found them (True: look)."""
        state = bytes(stored_event.state)
        named = self._named_keys(state) if named is True else named
        if not isinstance(named, tuple):  # under the master key, or in clear (written before subject keys)
            return state if self.cipher is None else super().decrypt_state(stored_event)
        size, ids, keys = named
        tombs = [k for k in keys if isinstance(k, Tombstone)]
        if tombs:  # erased since the keys were looked up
            raise _erased(stored_event, tombs).error()
        found = [k for k in keys if isinstance(k, DataKey)]
        if len(found) == len(keys):
            aad = _record_aad(state[:size], stored_event.originator_id, stored_event.originator_version)
            data = state[size:]
            try:
                for key in reversed(found):
                    data = key.cipher.decrypt(data, aad)
            except ValueError as exc:
                where, context = describe(stored_event)
                raise StoreError(
                    f"cannot decode stored event ({where}): it does not decrypt under its data "
                    "keys (damaged, or moved from another place in the log)",
                    **context,
                ) from exc
            return data
        # No such key: a master-key record whose nonce starts with the mark, or a lost key.
        if self.cipher is not None:
            try:
                return self.cipher.decrypt(state)
            except ValueError:
                pass
        missing = next(i for i, k in zip(ids, keys, strict=True) if k is None).hex()
        where, context = describe(stored_event)
        raise KeyMissingError(
            f"cannot decode stored event ({where}): it names data key {missing}, "
            "which the store's key table does not hold (and no tombstone says it was erased)",
            key_id=missing,
            **context,
        )


def _clear_record(stored_event: StoredEvent) -> ContentErased:
    """An erasure's record, stored in clear."""
    try:
        state = json.loads(bytes(stored_event.state[len(CLEAR_MARK) :]).decode("utf-8"))
        state["originator_id"] = stored_event.originator_id
        state["originator_version"] = stored_event.originator_version
        return ContentErased.model_validate(state)
    except ValueError as exc:  # JSON, UTF-8 and validation errors alike
        raise LogDamagedError(
            f"cannot decode an erasure's record: {exc}",
            topic=stored_event.topic,
            version=stored_event.originator_version,
        ) from exc


def key_ids_of(state: bytes) -> list[bytes] | None:
    """The data key ids a stored record's header names (format 1: one; format 2: one or
    more); None: the record has no such header (it is under the master key, or clear)."""
    if state[: len(MARK)] == MARK and len(state) >= _HEADER + OVERHEAD:
        return [bytes(state[len(MARK) : _HEADER])]
    if state[: len(MULTI_MARK)] == MULTI_MARK and len(state) > len(MULTI_MARK):
        count = state[len(MULTI_MARK)]
        start = len(MULTI_MARK) + 1
        if count and len(state) >= start + count * (KEY_ID_SIZE + OVERHEAD):
            return [
                bytes(state[start + i * KEY_ID_SIZE : start + (i + 1) * KEY_ID_SIZE]) for i in range(count)
            ]
    return None


def _erased(stored_event: StoredEvent, tombs: list[Tombstone]) -> ErasedEvent:
    """The placeholder of a record whose keys include the tombstones ``tombs``."""
    oid = stored_event.originator_id
    first = tombs[0]
    return ErasedEvent(
        originator_id=oid if isinstance(oid, UUID) else UUID(str(oid)),
        originator_version=stored_event.originator_version,
        topic=stored_event.topic,
        subject=first.subject,
        erased_at=first.erased_at,
        reason=first.reason,
        subjects=tuple(dict.fromkeys(t.subject for t in tombs)),
    )


def erased_subjects_of(app: Any) -> Callable[[UUID], tuple[str, ...]] | None:
    """What a conversation cached by an application is checked with before it is read
    (``SubjectMapper.erased_subjects``); None: its records are not under subject keys."""
    mapper = getattr(app, "mapper", None)
    if isinstance(mapper, SubjectMapper) and mapper.keys is not None and mapper.per_subject:
        return mapper.erased_subjects
    return None


def learn_erasures_of(app: Any) -> Callable[[UUID], tuple[str, ...]] | None:
    """The check of a conversation against the key table itself, before its content is
    sent out (``SubjectMapper.learn_erasures``); None: no subject keys."""
    mapper = getattr(app, "mapper", None)
    if isinstance(mapper, SubjectMapper) and mapper.keys is not None and mapper.per_subject:
        return mapper.learn_erasures
    return None


def subject_keys_of(app: Any) -> SubjectKeys | None:
    """The data keys of an eventsourcing application's store (a ``Ledger``, a shard),
    None if it has none (no cipher key)."""
    mapper = getattr(app, "mapper", None)
    return mapper.keys if isinstance(mapper, SubjectMapper) else None
