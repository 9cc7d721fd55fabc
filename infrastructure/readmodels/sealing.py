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
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from sqlalchemy import JSON, Dialect, Text, TypeDecorator

from contextledger.domain.errors import StoreError
from contextledger.infrastructure.aead import AESGCMCipher, decode_key

__all__ = ["SEALED_PREFIX", "ContentCodec", "SealedJSON", "SealedText", "codec_for_key"]

SEALED_PREFIX = "clsealed1:"


#: Mixed into the cipher key to derive the lookup columns' HMAC key (never the cipher
#: key itself).
_LOOKUP_CONTEXT = b"contextledger read-model lookup v1\x00"


class ContentCodec:
    """Seals and opens strings with a cipher (anything with ``encrypt``/``decrypt``);
    ``lookup`` gives the keyed digest that finds a sealed value (None: no lookup key)."""

    def __init__(self, cipher: Any, *, lookup_key: bytes | None = None) -> None:
        self._cipher = cipher
        self._lookup_key = lookup_key

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

    def open(self, value: str) -> str:
        try:
            data = self._cipher.decrypt(base64.b64decode(value[len(SEALED_PREFIX) :]))
        except Exception as exc:  # a wrong key or altered bytes
            raise StoreError(f"cannot decrypt a read-model value: {type(exc).__name__}") from exc
        return bytes(data).decode("utf-8", "surrogatepass")


def codec_for_key(key: str | None) -> ContentCodec | None:
    """The codec of a base64 AES key (None: no encryption)."""
    if not key:
        return None
    raw = decode_key(key)  # ConfigurationError if it is not a base64 AES key
    return ContentCodec(AESGCMCipher.from_key(raw), lookup_key=hashlib.sha256(_LOOKUP_CONTEXT + raw).digest())


def _is_sealed(value: Any) -> bool:
    return isinstance(value, str) and value.startswith(SEALED_PREFIX)


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
        return json.loads(self.codec.open(value))


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
