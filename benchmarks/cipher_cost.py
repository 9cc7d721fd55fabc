"""Per-event cost of encryption at rest: eventsourcing's pycryptodome ``AESCipher``
against the OpenSSL-backed ``AESGCMCipher`` (the same bytes), alone and through the
event mapper (a ~330-byte ``MessageAppended``), and the mapper with per-subject keys.

    .venv/bin/python benchmarks/cipher_cost.py [--events 20000]

Prints medians of five runs in µs per event (encrypt + decrypt for the ciphers;
``to_stored_event`` + ``to_domain_event`` for the mappers). The benchmark section of
docs/benchmarks.md is not written by this script.
"""

from __future__ import annotations

import argparse
import base64
import os
import statistics
import time
from collections.abc import Callable

from eventsourcing.cipher import AESCipher
from eventsourcing.utils import Environment

import contextledger as cl
from contextledger.infrastructure.keys.aead import AESGCMCipher
from contextledger.infrastructure.keys.mapper import JSONBytesTranscoder, PydanticMapper
from contextledger.infrastructure.keys.memory_key_table import MemoryKeyTable
from contextledger.infrastructure.keys.subject_keys import SubjectKeys
from contextledger.infrastructure.keys.subject_mapper import SubjectMapper


def per_event(n: int, step: Callable[[], object]) -> float:
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            step()
        runs.append((time.perf_counter() - start) / n * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--events", type=int, default=20000)
    n = parser.parse_args().events
    key = base64.b64encode(os.urandom(32)).decode()
    env = Environment(env={"CIPHER_KEY": key})
    payload = os.urandom(330)
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("You are terse.")
        ledger.append(cid, {"role": "user", "content": "word " * 50})
        event = ledger.store.events(cid)[-1]
    ciphers = (("pycryptodome AESCipher", AESCipher(env)), ("OpenSSL AESGCMCipher", AESGCMCipher(env)))
    for name, cipher in ciphers:
        blob = cipher.encrypt(payload)
        cost = per_event(n, lambda c=cipher, b=blob: (c.encrypt(payload), c.decrypt(b)))
        print(f"{name:40s} {cost:8.2f} µs/event (cipher alone, 330 bytes)")
    keys = SubjectKeys(MemoryKeyTable(), key)
    json = JSONBytesTranscoder()
    mappers: list[tuple[str, PydanticMapper]] = [
        ("mapper, no cipher", PydanticMapper(transcoder=json)),
        ("mapper + pycryptodome AESCipher", PydanticMapper(transcoder=json, cipher=AESCipher(env))),
        ("mapper + AESGCMCipher (store key)", PydanticMapper(transcoder=json, cipher=AESGCMCipher(env))),
    ]
    subject = SubjectMapper(transcoder=JSONBytesTranscoder(), cipher=AESGCMCipher(env))
    subject.use_keys(keys)
    mappers.append(("mapper + AESGCMCipher (subject key)", subject))
    for name, mapper in mappers:
        cost = per_event(n // 4, lambda m=mapper: m.to_domain_event(m.to_stored_event(event)))
        size = len(mapper.to_stored_event(event).state)
        print(f"{name:40s} {cost:8.2f} µs/event (encode + decode, {size} bytes)")


if __name__ == "__main__":
    main()
