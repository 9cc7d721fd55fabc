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

A fork's first record (``Forked``) holds the history it inherits from its source: it
is written under the key of the source's subject, so that erasing the source's
subject erases the inherited history in the fork too (the fork's later records are
under its own subject's key). ``ContentErased``, the record of an erasure (no content),
is stored in clear: ``b"CLC\x01"`` and its JSON, readable after the key is gone.

A record whose key is tombstoned reads as an ``ErasedEvent`` (never an error: a
follower reading a batch must go past it); a key id the table lacks, with no
tombstone, is ``KeyMissingError``. Writing a record of an erased subject is
``ConversationErasedError``.

``SubjectKeysFactory`` is mixed into the store factories (SQLite, PostgreSQL, memory):
the mapper it builds gets the store's key table (created with the event tables).
``Settings.key_scope`` (``CL_KEY_SCOPE``) chooses what new records are written under:
``subject`` (the default) or ``store`` (the master key, as before); both read both.
"""

from __future__ import annotations

import json
from contextvars import ContextVar
from typing import Any
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder

from contextledger.domain.erasure import ContentErased, ErasedEvent
from contextledger.domain.errors import ConfigurationError, KeyMissingError, LogDamagedError, StoreError
from contextledger.domain.events import Forked
from contextledger.infrastructure.aead import OVERHEAD
from contextledger.infrastructure.key_tables import KeyTable, MemoryKeyTable, PostgresKeyTable, SQLiteKeyTable
from contextledger.infrastructure.mapper import PydanticMapper
from contextledger.infrastructure.subject_keys import KEY_ID_SIZE, DataKey, SubjectKeys, Tombstone

__all__ = [
    "KEY_SCOPE",
    "MARK",
    "SUBJECT_MAPPER_TOPIC",
    "SubjectKeysFactory",
    "SubjectMapper",
    "subject_keys_of",
]

SUBJECT_MAPPER_TOPIC = "contextledger.infrastructure.subject_mapper:SubjectMapper"
#: The environment key of ``Settings.key_scope``.
KEY_SCOPE = "CL_KEY_SCOPE"
#: The first bytes of a record encrypted under a data key (format 1).
MARK = b"CLK\x01"
#: The first bytes of a record stored in clear (an erasure's record).
CLEAR_MARK = b"CLC\x01"
_HEADER = len(MARK) + KEY_ID_SIZE
#: The conversation whose subject's key the record being written goes under, when it
#: is not the record's own (a fork's inherited history: its source).
_KEY_OWNER: ContextVar[UUID | None] = ContextVar("contextledger_key_owner", default=None)


def _record_aad(header: bytes, originator_id: UUID | str, version: int) -> bytes:
    oid = originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
    return header + oid.bytes + version.to_bytes(8, "big", signed=True)


class SubjectMapper(PydanticMapper):
    """``PydanticMapper`` encrypting each record under its subject's key (module doc).
    Without keys (``use_keys`` not called) it is ``PydanticMapper`` with the master key."""

    keys: SubjectKeys | None = None
    #: Whether new records are written under subject keys (else the master key).
    per_subject: bool = False

    def use_keys(self, keys: SubjectKeys, *, per_subject: bool = True) -> None:
        self.keys = keys
        self.per_subject = per_subject

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
        if isinstance(domain_event, Forked):
            token = _KEY_OWNER.set(domain_event.origin.conversation_id)
            try:
                return super().to_stored_event(domain_event)
            finally:
                _KEY_OWNER.reset(token)
        return super().to_stored_event(domain_event)

    def encrypt_state(self, originator_id: UUID, originator_version: int, data: bytes) -> bytes:
        if self.keys is None or not self.per_subject:
            return super().encrypt_state(originator_id, originator_version, data)
        owner = _KEY_OWNER.get()
        key = self.keys.key_for_conversation(owner or originator_id)
        header = MARK + key.key_id
        return header + key.cipher.encrypt(data, _record_aad(header, originator_id, originator_version))

    # -- reading ----------------------------------------------------------------------

    def _named_key(self, state: bytes) -> DataKey | Tombstone | None:
        """The key a record's header names (None: no header, or a key the table lacks)."""
        if self.keys is None or len(state) < _HEADER + OVERHEAD or state[: len(MARK)] != MARK:
            return None
        return self.keys.key_by_id(bytes(state[len(MARK) : _HEADER]))

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        if stored_event.topic == ContentErased.TOPIC and bytes(stored_event.state[:4]) == CLEAR_MARK:
            return _clear_record(stored_event)
        if self.cipher is not None:
            key = self._named_key(stored_event.state)
            if isinstance(key, Tombstone):
                return _erased(stored_event, key)
        return super().to_domain_event(stored_event)

    def decrypt_state(self, stored_event: StoredEvent, where: str, context: dict[str, Any]) -> bytes:
        state = bytes(stored_event.state)
        if state[: len(MARK)] != MARK or len(state) < _HEADER + OVERHEAD:
            return super().decrypt_state(stored_event, where, context)
        key = self._named_key(state)
        header = state[:_HEADER]
        if isinstance(key, DataKey):
            aad = _record_aad(header, stored_event.originator_id, stored_event.originator_version)
            try:
                return key.cipher.decrypt(state[_HEADER:], aad)
            except ValueError as exc:
                raise StoreError(
                    f"cannot decode stored event ({where}): it does not decrypt under its data "
                    "key (damaged, or moved from another place in the log)",
                    **context,
                ) from exc
        if isinstance(key, Tombstone):  # erased between the two looks
            raise _erased(stored_event, key).error()
        # No such key: a record of the master key whose nonce starts with the mark, or
        # a key the table has lost.
        assert self.cipher is not None
        try:
            return self.cipher.decrypt(state)
        except ValueError:
            pass
        raise KeyMissingError(
            f"cannot decode stored event ({where}): it names data key {header[len(MARK) :].hex()}, "
            "which the store's key table does not hold (and no tombstone says it was erased)",
            key_id=header[len(MARK) :].hex(),
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


def _erased(stored_event: StoredEvent, tomb: Tombstone) -> ErasedEvent:
    """The placeholder of a record whose key is ``tomb``."""
    oid = stored_event.originator_id
    return ErasedEvent(
        originator_id=oid if isinstance(oid, UUID) else UUID(str(oid)),
        originator_version=stored_event.originator_version,
        topic=stored_event.topic,
        subject=tomb.subject,
        erased_at=tomb.erased_at,
        reason=tomb.reason,
    )


def subject_keys_of(app: Any) -> SubjectKeys | None:
    """The data keys of an eventsourcing application's store (a ``Ledger``, a shard),
    None if it has none (no cipher key)."""
    mapper = getattr(app, "mapper", None)
    return mapper.keys if isinstance(mapper, SubjectMapper) else None


class SubjectKeysFactory:
    """Mixed into an eventsourcing infrastructure factory (first among its bases): the
    ``SubjectMapper`` it builds gets the store's key table (see the module doc)."""

    def key_table(self) -> KeyTable:
        """The key table of this factory's store."""
        from eventsourcing.postgres import PostgresDatastore
        from eventsourcing.sqlite import SQLiteDatastore

        datastore = getattr(self, "datastore", None)
        env: Any = getattr(self, "env", None)
        if isinstance(datastore, SQLiteDatastore):
            return SQLiteKeyTable(datastore)
        if isinstance(datastore, PostgresDatastore):
            return PostgresKeyTable(
                datastore, prefix=(env.name.lower() if env is not None else "") or "stored"
            )
        return MemoryKeyTable()

    def mapper(self, transcoder: Transcoder | None = None, mapper_class: Any = None) -> Mapper[Any]:
        parent: Any = super()
        mapper: Mapper[Any] = parent.mapper(transcoder, mapper_class)
        if not isinstance(mapper, SubjectMapper) or mapper.cipher is None:
            return mapper
        env: Any = getattr(self, "env")  # noqa: B009 - set by the factory this is mixed into
        scope = env.get(KEY_SCOPE) or "subject"
        if scope not in ("subject", "store"):
            raise ConfigurationError(
                f"key_scope must be 'subject' or 'store', not {scope!r}", setting="key_scope"
            )
        table = self.key_table()
        creates = getattr(self, "env_create_table", None)
        if creates is None or creates():
            table.create_tables()
        mapper.use_keys(SubjectKeys(table, env.get("CIPHER_KEY")), per_subject=scope == "subject")
        return mapper
