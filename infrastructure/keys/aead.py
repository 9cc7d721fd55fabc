"""AES-GCM through OpenSSL (the ``cryptography`` package), in eventsourcing's byte layout.

``AESGCMCipher`` is an eventsourcing ``Cipher`` (``CIPHER_TOPIC``
``contextledger.infrastructure.keys.aead:AESGCMCipher``, key in ``CIPHER_KEY``) that reads
and writes exactly what ``eventsourcing.cipher:AESCipher`` (pycryptodome) does::

    nonce (12 random bytes) | tag (16 bytes) | ciphertext (as long as the plaintext)

so a store encrypted by earlier versions loads unchanged, and either cipher opens what
the other wrote. It differs in cost only: the OpenSSL context is made once per key
(pycryptodome builds a cipher object per call), about 300 µs less per event here.

``encrypt``/``decrypt`` take optional associated data (authenticated, not stored): the
per-subject formats (``subject_keys``, ``subject_mapper``) bind their clear header and
the record's identity with it. Without it the bytes are eventsourcing's exactly.
"""

from __future__ import annotations

import base64
import binascii
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from eventsourcing.persistence import Cipher
from eventsourcing.utils import Environment

from contextledger.domain.values.errors import ConfigurationError

__all__ = ["AESGCM_TOPIC", "AESGCMCipher", "decode_key", "new_key"]

AESGCM_TOPIC = "contextledger.infrastructure.keys.aead:AESGCMCipher"

NONCE_SIZE = 12
TAG_SIZE = 16
#: Bytes an encryption adds to its plaintext.
OVERHEAD = NONCE_SIZE + TAG_SIZE
KEY_SIZES = (16, 24, 32)


def decode_key(key: str | bytes, *, setting: str = "cipher_key") -> bytes:
    """The raw bytes of an AES key given as base64 text (or as raw bytes);
    ``ConfigurationError`` if it is not 16, 24 or 32 bytes of base64."""
    if isinstance(key, bytes):
        raw = key
    else:
        try:
            raw = base64.b64decode(key.encode("utf-8"))  # as eventsourcing reads it
        except (binascii.Error, UnicodeEncodeError, ValueError) as exc:
            raise ConfigurationError(
                'the cipher key is not base64 (make one with: python -c "import base64, os; '
                'print(base64.b64encode(os.urandom(32)).decode())")',
                setting=setting,
            ) from exc
    if len(raw) not in KEY_SIZES:
        raise ConfigurationError(
            f"the cipher key holds {len(raw)} bytes; an AES key holds 16, 24 or 32", setting=setting
        )
    return raw


def new_key() -> bytes:
    """A random 32-byte AES key."""
    return os.urandom(32)


class AESGCMCipher(Cipher):
    """AES-GCM (OpenSSL) in the layout of eventsourcing's ``AESCipher`` (see the module
    doc). Built from an eventsourcing ``Environment`` holding ``CIPHER_KEY`` (base64), or
    with ``AESGCMCipher.from_key(raw_or_base64)``."""

    CIPHER_KEY = "CIPHER_KEY"

    def __init__(self, environment: Environment) -> None:
        key = environment.get(self.CIPHER_KEY)
        if not key:
            raise ConfigurationError(f"{self.CIPHER_KEY!r} is not set", setting="cipher_key")
        self._init(decode_key(key))

    def _init(self, raw: bytes) -> None:
        self._aead = AESGCM(raw)

    @classmethod
    def from_key(cls, key: str | bytes) -> AESGCMCipher:
        """The cipher of ``key``: raw bytes, or base64 text."""
        cipher = cls.__new__(cls)
        cipher._init(decode_key(key))
        return cipher

    def __repr__(self) -> str:
        return "AESGCMCipher(key=***)"

    def encrypt(self, plaintext: bytes, aad: bytes | None = None) -> bytes:
        """``nonce | tag | ciphertext`` of ``plaintext`` (``aad`` authenticated too)."""
        nonce = os.urandom(NONCE_SIZE)
        sealed = self._aead.encrypt(nonce, plaintext, aad)  # ciphertext | tag
        return nonce + sealed[-TAG_SIZE:] + sealed[:-TAG_SIZE]

    def decrypt_from(self, data: bytes, start: int, aad: bytes) -> bytes:
        """``decrypt`` of ``data[start:]`` (at least ``OVERHEAD`` bytes: the caller
        checks), without copying it out first: a stored record's body after its header."""
        try:
            return self._aead.decrypt(
                data[start : start + NONCE_SIZE],
                data[start + OVERHEAD :] + data[start + NONCE_SIZE : start + OVERHEAD],
                aad,
            )
        except InvalidTag:
            raise ValueError("Cipher text is damaged, or not of this key") from None

    def decrypt(self, ciphertext: bytes, aad: bytes | None = None) -> bytes:
        """The plaintext of ``nonce | tag | ciphertext``; ``ValueError`` if the bytes are
        damaged, or were written under another key or other associated data."""
        data = bytes(ciphertext)
        if len(data) < OVERHEAD:
            raise ValueError("Damaged cipher text: shorter than its nonce and tag")
        nonce, tag, body = data[:NONCE_SIZE], data[NONCE_SIZE:OVERHEAD], data[OVERHEAD:]
        try:
            return self._aead.decrypt(nonce, body + tag, aad)
        except InvalidTag:
            raise ValueError("Cipher text is damaged, or not of this key") from None
