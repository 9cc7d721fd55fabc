"""Encryption at rest for the read models' content columns.

With a cipher key, the columns that hold what people wrote (``cl_transcript.message``,
``cl_summaries.text``) are sealed with the event store's own cipher (AES-GCM in
eventsourcing's ``AESCipher`` layout, ``aead.AESGCMCipher``, the same key): each value
is stored as ``clsealed1:`` followed by the base64 of the encrypted UTF-8 JSON (a JSON
column) or text. The column types do not
change, so a table made without a key keeps its schema; values are sealed and opened
at the column boundary (SQLAlchemy ``TypeDecorator``), so views add columns freely.

The application's own names of things are sealed too: conversation keys (a fork's
key among them: ``cl_conversations.key``, ``cl_token_totals.key``) and client message
ids (``cl_transcript.client_message_id``). So that they can still be looked up, each
has a lookup column beside it (``key_lookup``, ``client_message_lookup``) holding
``ContentCodec.lookup(value)``: an HMAC-SHA256 under a key derived from the cipher key,
equal for equal values, telling nothing without the key (``SQLConversationsView.by_key``).
Without a cipher key the values are stored as they are and the lookup columns are
empty.

Reading a sealed value without the key raises ``StoreError`` (set the key); a value
written before the key was set is read as it is (rebuild the read models to seal it).

Per data subject (``subject_keys``): with the store's keys (``SQLReadModels.for_ledger``
on a ledger whose records go under subject keys), every sealed value -- message text
and tool arguments, summaries, reasons, conversation keys, client message ids -- is
sealed under the data key of the subject whose content it holds, as ``clsealed2:``
followed by the base64 of ``b"CLK\x01" | key id | nonce | tag | ciphertext``; a value
holding several subjects' content (a fork's copy of its inherited rows, a fork's
summary reaching back into them) under all their keys, one inside the other, as
``b"CLK\x02" | count | key ids | ciphertext`` (the event mapper's formats: mark and key
ids in clear and authenticated). The views seal each value where they know its
conversation (``ContentCodec.seal_for``) and hand the column a ``Sealed`` string,
which it stores as it is. Erasing a subject destroys its key: every value sealed
under it, in the read models, in a copy of them taken before the erasure or in a
dead PostgreSQL row version, stops opening, without a VACUUM. Opening needs no
conversation id: the key ids name the keys. A value with a tombstoned key opens as
None (``ERASED``), a key the table lacks is ``KeyMissingError``. The lookup digests
stay under the key derived from the store's key (they tell equal values apart, not
what they are). Read models sealed under the store's key by an earlier release are
rebuilt when opened with the store's keys (``SQLView.upgrade``).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Callable, Sequence
from typing import Any
from uuid import UUID

from sqlalchemy import JSON, Dialect, Text, TypeDecorator

from contextledger.domain.values.errors import KeyMissingError, StoreError
from contextledger.infrastructure.keys.aead import AESGCMCipher, decode_key
from contextledger.infrastructure.keys.subject_keys import KEY_ID_SIZE, DataKey, SubjectKeys, Tombstone
from contextledger.infrastructure.keys.subject_mapper import MARK, MAX_KEYS, MULTI_MARK, key_ids_of

__all__ = [
    "SEALED_PREFIX",
    "SUBJECT_SEALED_PREFIX",
    "ContentCodec",
    "Sealed",
    "SealedJSON",
    "SealedText",
    "SubjectSealer",
    "codec_for_key",
    "is_subject_sealed",
]

SEALED_PREFIX = "clsealed1:"
SUBJECT_SEALED_PREFIX = "clsealed2:"
_HEADER = len(MARK) + KEY_ID_SIZE


class Sealed(str):
    """A value a view sealed already (``ContentCodec.seal_for``): the column stores it as
    it is."""

    __slots__ = ()


#: What a conversation's content subjects are, for values reaching into what it
#: inherited: ``(subjects inherited, last position shared)`` or None (``Lineage.inherited``).
InheritedOf = Callable[[UUID], Any]


class SubjectSealer:
    """Seals read-model values under the keys of the subjects whose content they hold
    (module doc). ``inherited``: what a conversation inherits (the event mapper's
    ``Lineage.inherited``; None: nothing is looked up, a fork's copies go under its
    own key and its source's)."""

    def __init__(self, keys: SubjectKeys, inherited: InheritedOf | None = None) -> None:
        self.keys = keys
        self._inherited = inherited

    def __repr__(self) -> str:
        return f"SubjectSealer({self.keys!r})"

    def seal(self, conversation_id: UUID, text: str) -> str:
        """``text`` sealed under the key of the conversation's subject;
        ``ConversationErasedError`` if the subject was erased."""
        key = self.keys.key_for_conversation(conversation_id)  # cached
        header = MARK + key.key_id  # ``seal_under`` of one key, as every message's value is
        data = key.cipher.encrypt(text.encode("utf-8", "surrogatepass"), header)
        return SUBJECT_SEALED_PREFIX + base64.b64encode(header + data).decode("ascii")

    def seal_inherited(self, conversation_id: UUID, text: str, *, covers_from: int | None = None) -> str:
        """``text`` of a value that holds what the conversation inherited (from
        ``covers_from`` on, if given: a summary's window; None: an inherited row), sealed
        under its own subject's key and every inherited subject's."""
        own = self.keys.key_for_conversation(conversation_id)
        found = None if self._inherited is None else self._inherited(conversation_id)
        if found is None or (covers_from is not None and covers_from > found.through_position):
            return self.seal_under([own], text)
        keys = [own, *(self.keys.key_for(subject) for subject in found.subjects)]
        return self.seal_under(keys, text)

    def seal_under(self, keys: Sequence[DataKey], text: str) -> str:
        """``text`` sealed under every key of ``keys`` (one inside the other)."""
        unique = list({k.key_id: k for k in keys}.values())
        if len(unique) > MAX_KEYS:
            raise StoreError(f"a read-model value can name at most {MAX_KEYS} data keys, not {len(unique)}")
        if len(unique) == 1:
            header = MARK + unique[0].key_id
        else:
            header = MULTI_MARK + bytes([len(unique)]) + b"".join(k.key_id for k in unique)
        data = text.encode("utf-8", "surrogatepass")
        for key in unique:
            data = key.cipher.encrypt(data, header)
        return SUBJECT_SEALED_PREFIX + base64.b64encode(header + data).decode("ascii")

    def open(self, value: str) -> str | None:
        """The text of a sealed value; None if a subject whose key it is under was erased."""
        try:
            data = base64.b64decode(value[len(SUBJECT_SEALED_PREFIX) :], validate=True)
        except ValueError as exc:
            raise StoreError("a sealed read-model value is damaged (not base64)") from exc
        ids = key_ids_of(data)
        if ids is None:
            raise StoreError("a sealed read-model value is damaged (no key header)")
        size = _HEADER if data[: len(MARK)] == MARK else len(MULTI_MARK) + 1 + KEY_ID_SIZE * len(ids)
        header = data[:size]
        found = [self.keys.key_by_id(key_id) for key_id in ids]
        if any(isinstance(key, Tombstone) for key in found):
            return None
        missing = next((key_id for key_id, key in zip(ids, found, strict=True) if key is None), None)
        if missing is not None:
            raise KeyMissingError(
                f"a read-model value names data key {missing.hex()}, which the store's "
                "key table does not hold (and no tombstone says it was erased)",
                key_id=missing.hex(),
            )
        text = data[size:]
        try:
            for key in reversed(found):
                assert isinstance(key, DataKey)
                text = key.cipher.decrypt(text, header)
        except ValueError as exc:
            raise StoreError("cannot decrypt a read-model value under its data key (altered)") from exc
        return text.decode("utf-8", "surrogatepass")


#: Mixed into the cipher key to derive the lookup columns' HMAC key (never the cipher
#: key itself).
_LOOKUP_CONTEXT = b"contextledger read-model lookup v1\x00"


class ContentCodec:
    """Seals and opens strings with a cipher (anything with ``encrypt``/``decrypt``);
    ``lookup`` gives the keyed digest that finds a sealed value (None: no lookup key)."""

    def __init__(
        self, cipher: Any, *, lookup_key: bytes | None = None, subjects: SubjectSealer | None = None
    ) -> None:
        self._cipher = cipher
        self._lookup_key = lookup_key
        #: Seals and opens values per data subject (None: the store's key only).
        self.subjects = subjects

    def lookup(self, text: str) -> str | None:
        """HMAC-SHA256 of ``text`` under the lookup key, hex (None without one)."""
        if self._lookup_key is None:
            return None
        return hmac.new(self._lookup_key, text.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()

    def __repr__(self) -> str:
        return "ContentCodec(cipher=***)"

    def seal(self, text: str) -> str:
        data = self._cipher.encrypt(text.encode("utf-8", "surrogatepass"))
        return SEALED_PREFIX + base64.b64encode(data).decode("ascii")

    def seal_for(self, conversation_id: UUID, text: str) -> str:
        """``text`` sealed under the conversation's subject key when the codec has
        per-subject keys, else under the store's key (``seal``)."""
        if self.subjects is None:
            return self.seal(text)
        return self.subjects.seal(conversation_id, text)

    def sealed_value(
        self,
        conversation_id: UUID,
        value: Any,
        *,
        json_value: bool = False,
        inherited: bool = False,
        covers_from: int | None = None,
    ) -> Any:
        """``value`` of one of the conversation's rows as the column is to store it: with
        per-subject keys, sealed under its subject's key (``inherited``: a value that may
        hold what the conversation inherited -- all of it, or a summary's window from
        ``covers_from`` -- under the inherited subjects' keys too) as a ``Sealed``;
        without them, as it is (the column seals it under the store's key). A JSON
        column's value is sealed as its JSON text. ``ConversationErasedError`` if a
        subject it goes under was erased."""
        if value is None or self.subjects is None:
            return value
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False) if json_value else value
        if inherited or covers_from is not None:
            return Sealed(self.subjects.seal_inherited(conversation_id, text, covers_from=covers_from))
        return Sealed(self.subjects.seal(conversation_id, text))

    def open(self, value: str) -> str | None:
        """The text of a sealed value (None: its data subject was erased)."""
        if value.startswith(SUBJECT_SEALED_PREFIX):
            if self.subjects is None:
                raise StoreError(
                    "a read-model value is sealed under a data-subject key: open the read models "
                    "with the store's keys (SQLReadModels.for_ledger)",
                    cause="encrypted",
                )
            return self.subjects.open(value)
        try:
            data = self._cipher.decrypt(base64.b64decode(value[len(SEALED_PREFIX) :]))
        except Exception as exc:  # a wrong key or altered bytes
            raise StoreError(f"cannot decrypt a read-model value: {type(exc).__name__}") from exc
        return bytes(data).decode("utf-8", "surrogatepass")


def codec_for_key(
    key: str | None, *, keys: SubjectKeys | None = None, inherited: InheritedOf | None = None
) -> ContentCodec | None:
    """The codec of a base64 AES key (None: no encryption); given the store's ``keys``,
    it seals values per data subject and opens them (``inherited``: see ``SubjectSealer``)."""
    if not key:
        return None
    raw = decode_key(key)  # ConfigurationError if it is not a base64 AES key
    return ContentCodec(
        AESGCMCipher.from_key(raw),
        lookup_key=hashlib.sha256(_LOOKUP_CONTEXT + raw).digest(),
        subjects=None if keys is None else SubjectSealer(keys, inherited),
    )


def is_subject_sealed(raw: Any) -> bool:
    """Whether a stored value (a text or JSON column's raw text) is sealed per subject."""
    return isinstance(raw, str) and raw.lstrip('"').startswith(SUBJECT_SEALED_PREFIX)


def _is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith((SEALED_PREFIX, SUBJECT_SEALED_PREFIX))


def _unreadable() -> StoreError:
    return StoreError(
        "the read models hold encrypted content: open them with the cipher key (CONTEXTLEDGER_CIPHER_KEY)",
        cause="encrypted",
    )


class SealedJSON(TypeDecorator[Any]):
    """A JSON column whose values are sealed with ``codec`` (None: plain JSON)."""

    impl = JSON
    cache_ok = True

    def __init__(self, codec: ContentCodec | None = None) -> None:
        super().__init__()
        self.codec = codec

    def process_bind_param(self, value: Any, dialect: Dialect) -> Any:
        if value is None or self.codec is None or isinstance(value, Sealed):
            return value
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        return self.codec.seal(text)

    def process_result_value(self, value: Any, dialect: Dialect) -> Any:
        if not _is_sealed(value):
            return value
        if self.codec is None:
            raise _unreadable()
        text = self.codec.open(value)
        return None if text is None else json.loads(text)


class SealedText(TypeDecorator[str]):
    """A text column whose values are sealed with ``codec`` (None: plain text)."""

    impl = Text
    cache_ok = True

    def __init__(self, codec: ContentCodec | None = None) -> None:
        super().__init__()
        self.codec = codec

    def process_bind_param(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or self.codec is None or isinstance(value, Sealed):
            return value
        return self.codec.seal(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or not _is_sealed(value):
            return value
        if self.codec is None:
            raise _unreadable()
        return self.codec.open(value)
