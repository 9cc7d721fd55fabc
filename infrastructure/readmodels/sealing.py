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

Per data subject (``subject_keys``): ``SubjectSealer.seal(conversation_id, text)`` seals
a value under the key of the conversation's data subject, as ``clsealed2:`` followed by
the base64 of ``b"CLK\x01" | key id | nonce | tag | ciphertext`` (the mark and key id
in clear and authenticated, as in the event store), so that erasing the subject makes
the row unreadable too. Opening needs no conversation id: the key id names the key. A
value whose key is tombstoned opens as None (``ERASED``), a key the table lacks is
``KeyMissingError``. A ``ContentCodec`` given a ``SubjectSealer`` opens both forms; the
views seal with ``ContentCodec.seal_for(conversation_id, text)`` where they know the
conversation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any
from uuid import UUID

from sqlalchemy import JSON, Dialect, Text, TypeDecorator

from contextledger.domain.values.errors import KeyMissingError, StoreError
from contextledger.infrastructure.keys.aead import OVERHEAD, AESGCMCipher, decode_key
from contextledger.infrastructure.keys.subject_keys import KEY_ID_SIZE, SubjectKeys, Tombstone
from contextledger.infrastructure.keys.subject_mapper import MARK

__all__ = [
    "SEALED_PREFIX",
    "SUBJECT_SEALED_PREFIX",
    "ContentCodec",
    "SealedJSON",
    "SealedText",
    "SubjectSealer",
    "codec_for_key",
]

SEALED_PREFIX = "clsealed1:"
SUBJECT_SEALED_PREFIX = "clsealed2:"
_HEADER = len(MARK) + KEY_ID_SIZE


class SubjectSealer:
    """Seals read-model values under their conversation's data-subject key (module doc)."""

    def __init__(self, keys: SubjectKeys) -> None:
        self.keys = keys

    def __repr__(self) -> str:
        return f"SubjectSealer({self.keys!r})"

    def seal(self, conversation_id: UUID, text: str) -> str:
        """``text`` sealed under the key of the conversation's subject;
        ``ConversationErasedError`` if the subject was erased."""
        key = self.keys.key_for_conversation(conversation_id)
        header = MARK + key.key_id
        data = header + key.cipher.encrypt(text.encode("utf-8", "surrogatepass"), header)
        return SUBJECT_SEALED_PREFIX + base64.b64encode(data).decode("ascii")

    def open(self, value: str) -> str | None:
        """The text of a sealed value; None if its subject was erased."""
        try:
            data = base64.b64decode(value[len(SUBJECT_SEALED_PREFIX) :], validate=True)
        except ValueError as exc:
            raise StoreError("a sealed read-model value is damaged (not base64)") from exc
        if len(data) < _HEADER + OVERHEAD or data[: len(MARK)] != MARK:
            raise StoreError("a sealed read-model value is damaged (no key header)")
        header = data[:_HEADER]
        key = self.keys.key_by_id(header[len(MARK) :])
        if isinstance(key, Tombstone):
            return None
        if key is None:
            raise KeyMissingError(
                f"a read-model value names data key {header[len(MARK) :].hex()}, which the store's "
                "key table does not hold (and no tombstone says it was erased)",
                key_id=header[len(MARK) :].hex(),
            )
        try:
            return key.cipher.decrypt(data[_HEADER:], header).decode("utf-8", "surrogatepass")
        except ValueError as exc:
            raise StoreError("cannot decrypt a read-model value under its data key (altered)") from exc


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


def codec_for_key(key: str | None, *, keys: SubjectKeys | None = None) -> ContentCodec | None:
    """The codec of a base64 AES key (None: no encryption), opening values sealed per
    data subject too when given the store's ``keys``."""
    if not key:
        return None
    raw = decode_key(key)  # ConfigurationError if it is not a base64 AES key
    return ContentCodec(
        AESGCMCipher.from_key(raw),
        lookup_key=hashlib.sha256(_LOOKUP_CONTEXT + raw).digest(),
        subjects=None if keys is None else SubjectSealer(keys),
    )


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
        if value is None or self.codec is None:
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
        if value is None or self.codec is None:
            return value
        return self.codec.seal(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> str | None:
        if value is None or not _is_sealed(value):
            return value
        if self.codec is None:
            raise _unreadable()
        return self.codec.open(value)
