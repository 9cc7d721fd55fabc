"""The OpenSSL AES-GCM cipher reads and writes eventsourcing's ``AESCipher`` layout."""

from __future__ import annotations

import base64
import os

import pytest
from eventsourcing.cipher import AESCipher
from eventsourcing.utils import Environment
from hypothesis import given
from hypothesis import strategies as st

from contextledger.domain.values.errors import ConfigurationError
from contextledger.infrastructure.keys.aead import AESGCMCipher

KEY = base64.b64encode(os.urandom(32)).decode()
ENV = Environment(env={"CIPHER_KEY": KEY})


@given(st.binary(max_size=2000))
def test_what_either_cipher_writes_the_other_reads(plaintext: bytes) -> None:
    ours, theirs = AESGCMCipher(ENV), AESCipher(ENV)
    assert ours.decrypt(theirs.encrypt(plaintext)) == plaintext
    assert theirs.decrypt(ours.encrypt(plaintext)) == plaintext


def test_the_layout_is_nonce_tag_ciphertext() -> None:
    data = AESGCMCipher(ENV).encrypt(b"hello world")
    assert len(data) == 12 + 16 + len(b"hello world")
    # pycryptodome, given the nonce and tag from where eventsourcing puts them, agrees.
    from Crypto.Cipher import AES

    aes = AES.new(base64.b64decode(KEY), AES.MODE_GCM, data[:12])
    assert aes.decrypt_and_verify(data[28:], data[12:28]) == b"hello world"


def test_associated_data_must_match() -> None:
    cipher = AESGCMCipher.from_key(base64.b64decode(KEY))
    data = cipher.encrypt(b"x", aad=b"conversation 1")
    assert cipher.decrypt(data, aad=b"conversation 1") == b"x"
    with pytest.raises(ValueError, match="damaged"):
        cipher.decrypt(data, aad=b"conversation 2")
    with pytest.raises(ValueError, match="damaged"):
        cipher.decrypt(data)


def test_another_key_or_altered_bytes_do_not_decrypt() -> None:
    data = bytearray(AESGCMCipher(ENV).encrypt(b"secret"))
    with pytest.raises(ValueError):
        AESGCMCipher.from_key(os.urandom(32)).decrypt(bytes(data))
    data[-1] ^= 1
    with pytest.raises(ValueError):
        AESGCMCipher(ENV).decrypt(bytes(data))
    with pytest.raises(ValueError, match="shorter"):
        AESGCMCipher(ENV).decrypt(b"short")


@pytest.mark.parametrize("bad", ["not base64!", base64.b64encode(b"short").decode(), ""])
def test_a_bad_key_is_a_configuration_error(bad: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        AESGCMCipher(Environment(env={"CIPHER_KEY": bad}))
    assert caught.value.setting == "cipher_key" and KEY not in str(caught.value)
