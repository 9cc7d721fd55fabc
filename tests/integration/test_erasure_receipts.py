"""Erasure receipts on a real SQLite file and on PostgreSQL, with and without a master
key: ``erase`` returns what it destroyed, content-free; ``check_receipt`` finds it
recorded, its keys gone and nothing of the subject readable -- and says what does not
hold against a forged receipt or a store restored from before the erasure."""

from __future__ import annotations

import base64
import os
import shutil
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.privacy.receipts import record_digest
from contextledger.domain.erasure import Erasure
from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)


def open_ledger(url: str, keyed: bool, key: str) -> cl.Ledger:
    return cl.Ledger.open(
        settings=cl.Settings(database_url=url, run_policy=False, cipher_key=key if keyed else None)
    )


@pytest.fixture(scope="module")
def master() -> str:
    return base64.b64encode(os.urandom(32)).decode()


@pytest.mark.parametrize("keyed", [False, True], ids=["no-master-key", "master-key"])
def test_a_receipt_says_what_was_destroyed_and_checks_out(shared_url: str, keyed: bool, master: str) -> None:
    with open_ledger(shared_url, keyed, master) as ledger:
        a = ledger.start("You help.", policy=POLICY, subject="user-42")
        for n in range(3):
            ledger.append(a, {"role": "user", "content": f"secret {n}"})
        b = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(b, {"role": "user", "content": "another"})
        fork = ledger.fork(a, subject="team-9")
        ledger.append(fork, {"role": "user", "content": "the team's own"})
        other = ledger.start("You help.", policy=POLICY, subject="user-7")
        ledger.append(other, {"role": "user", "content": "kept"})
        keys = subject_keys_of(ledger)
        assert keys is not None
        report = ledger.erase(subject="user-42", reason="request 118")
        receipt = report.receipt
        assert receipt is not None
        assert receipt.subject == "user-42" and receipt.reason == "request 118"
        assert set(receipt.conversations) == {a, b} and receipt.forks == (fork,)
        ranges = {r.conversation_id: (r.events, r.first_version, r.last_version) for r in receipt.ranges}
        assert ranges[a] == (4, 1, 4) and ranges[b] == (2, 1, 2) and ranges[fork][1] == 1
        tomb = keys.tombstone_of("user-42")
        assert tomb is not None and receipt.key_ids == (tomb.key_id.hex(),)
        assert receipt.erased_at == report.erased_at == tomb.erased_at
        record = ledger.repository.get(Erasure.id_for("user-42")).record
        assert receipt.record_id == record.originator_id and receipt.record_digest == record_digest(record)
        text = str(receipt.to_json())
        assert "secret" not in text and "another" not in text

        check = ledger.check_receipt(receipt.to_json())
        assert check.ok, check.problems
        again = ledger.erase(subject="user-42", reason="again")
        assert again.already_erased and again.receipt == receipt


def test_a_forged_receipt_is_caught(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'app.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": "secret"})
        ledger.start("You help.", policy=POLICY, subject="user-7")
        receipt = ledger.erase("user-42", reason="test").receipt
        assert receipt is not None
        good = receipt.to_json()
        forged: list[tuple[dict[str, Any], str]] = [
            ({"record_digest": "0" * 64}, "does not match the receipt's digest"),
            ({"key_ids": ["ab" * 16]}, "is not a tombstone"),
            ({"ranges": [{**good["ranges"][0], "events": 9}]}, "the receipt counts 9"),
            ({"subject": "user-7", "record_id": str(Erasure.id_for("user-7"))}, "no erasure of subject"),
        ]
        for change, said in forged:
            check = ledger.check_receipt({**good, **change})
            assert not check.ok and any(said in p for p in check.problems), (change, check.problems)
        with pytest.raises(cl.InvalidArgumentError, match="not an erasure receipt"):
            ledger.check_receipt({"format": "something else"})
        with pytest.raises(cl.InvalidArgumentError, match="not an erasure receipt"):
            ledger.check_receipt({**good, "ranges": "nope"})


def test_against_a_store_restored_from_before_the_erasure_the_receipt_fails(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    url = f"sqlite:///{path}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": "secret"})
    backup = tmp_path / "backup.db"
    shutil.copyfile(path, backup)
    with cl.Ledger.open(url, run_policy=False) as ledger:
        receipt = ledger.erase("user-42", reason="test").receipt
    assert receipt is not None
    with cl.Ledger.open(f"sqlite:///{backup}", run_policy=False) as restored:
        check = restored.check_receipt(receipt)
    assert not check.ok
    problems = " | ".join(check.problems)
    assert "no erasure of subject 'user-42' is recorded" in problems
    assert "has no tombstone" in problems
    assert f"conversation {cid}: 2 records are readable" in problems


@given(
    subject=st.text(min_size=1, max_size=40).filter(lambda s: s.strip() and "\x00" not in s),
    reason=st.text(min_size=1, max_size=80),
    counts=st.lists(st.integers(min_value=1, max_value=10**6), max_size=4),
)
def test_a_receipts_json_form_reads_back_as_the_same_receipt(
    subject: str, reason: str, counts: list[int]
) -> None:
    receipt = cl.ErasureReceipt(
        subject=subject,
        conversations=tuple(uuid4() for _ in counts),
        forks=(uuid4(),),
        ranges=tuple(cl.ErasedRange(uuid4(), n, 1, n) for n in counts),
        key_ids=(os.urandom(16).hex(),),
        erased_at=datetime.now(UTC),
        reason=reason,
        record_id=Erasure.id_for(subject),
        record_digest=os.urandom(32).hex(),
    )
    assert cl.ErasureReceipt.from_json(receipt.to_json()) == receipt
    assert receipt.events == sum(counts)
    assert isinstance(receipt.record_id, UUID)
