"""Keys apart from the log (``Settings.key_store``), on SQLite files and on PostgreSQL
(the key store a database of its own on the test server, made and dropped by the test).

- a copy of the event store -- every file of it, taken while the ledger is open (the
  SQLite WAL included), or PostgreSQL's dump of its schema -- holds none of the data
  keys (the key store's copy does: the scan finds keys where they are); once the
  subject is erased, the copy, opened with the key store, no longer reads;
- a store that uses a key store is refused without it or with another one, and a store
  that keeps its keys itself cannot be given one (``ConfigurationError``, nothing made);
- master-key rotation, receipts, ``export_subject``, forks across an erasure and the
  restore path (``erase --export-journal`` / ``--reapply``) work with a key store.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import sqlite3
import subprocess
import uuid
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

POLICY = cl.ReductionPolicy(trigger_messages=1000, keep_messages=10)
SECRET = "the locker code is 4471-heron-quartz"
ADMIN = os.environ.get("CONTEXTLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test").split(
    "?"
)[0]


def settings(url: str, key_store: str | None, **more: Any) -> cl.Settings:
    return cl.Settings(database_url=url, key_store=key_store, run_policy=False, **more)


@pytest.fixture(params=["sqlite", "postgres"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str]:
    """An event store and a key store of its kind."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}", f"sqlite:///{tmp_path / 'keys.db'}"
    return request.getfixturevalue("postgres_url"), request.getfixturevalue("postgres_key_store_url")


@contextmanager
def fresh_database() -> Iterator[str]:
    """A new database on the test server (the URL), dropped afterwards."""
    name = f"copy_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{ADMIN.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')


@contextmanager
def fresh_schema() -> Iterator[str]:
    """A new schema of the test database (the URL), dropped afterwards."""
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(ADMIN, autocommit=True) as admin:
        admin.execute(f'CREATE SCHEMA "{schema}"')
    try:
        yield f"{ADMIN}?schema={schema}"
    finally:
        with psycopg.connect(ADMIN, autocommit=True) as admin:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')


def sqlite_files(url: str) -> list[Path]:
    """Every file of a SQLite store: the database, its -wal and -shm."""
    path = Path(url.removeprefix("sqlite:///"))
    return sorted(p for p in path.parent.iterdir() if p.name.startswith(path.name))


def pg_dump(url: str) -> bytes:
    """PostgreSQL's dump of a database (of the URL's schema alone, if it names one)."""
    base, _, schema = url.partition("?schema=")
    command = ["pg_dump", "--no-owner", "-d", base, *(["-n", schema] if schema else [])]
    return subprocess.run(command, check=True, capture_output=True).stdout


@contextmanager
def copy_of(url: str, tmp: Path) -> Iterator[tuple[str, bytes]]:
    """A copy of the event store at ``url`` (its URL) and every byte of it: its SQLite
    files, or its PostgreSQL schema dumped and restored into another database."""
    if url.startswith("sqlite"):
        folder = tmp / "copy"
        folder.mkdir()
        found = sqlite_files(url)
        assert any(p.name.endswith("-wal") for p in found)  # taken while the log is in its WAL
        for path in found:
            shutil.copyfile(path, folder / path.name)
        name = Path(url.removeprefix("sqlite:///")).name
        yield f"sqlite:///{folder / name}", b"".join(p.read_bytes() for p in found)
        return
    dump = pg_dump(url)
    schema = url.partition("?schema=")[2]
    with fresh_database() as copy:
        subprocess.run(
            ["psql", "-q", "-v", "ON_ERROR_STOP=1", "-d", copy], input=dump, check=True, capture_output=True
        )
        yield f"{copy}?schema={schema}", dump


def key_store_bytes(key_store: str) -> bytes:
    if key_store.startswith("sqlite"):
        return b"".join(p.read_bytes() for p in sqlite_files(key_store))
    return pg_dump(key_store)


def data_keys(key_store: str) -> list[bytes]:
    """The data keys the key store holds (unwrapped: no master key is set)."""
    query = "SELECT wrapped_key FROM {t} WHERE subject <> '' AND wrapped_key IS NOT NULL"
    if key_store.startswith("sqlite"):
        with closing(sqlite3.connect(key_store.removeprefix("sqlite:///"))) as db:
            rows = db.execute(query.format(t="stored_subject_keys")).fetchall()
    else:
        with psycopg.connect(key_store) as conn:
            rows = conn.execute(query.format(t="contextledger_subject_keys")).fetchall()
    return [bytes(r[0]) for r in rows]


def forms(key: bytes) -> list[bytes]:
    """A key as its bytes, in hex and in base64."""
    return [key, key.hex().encode(), base64.b64encode(key)]


def test_a_copy_of_the_event_store_holds_no_key_and_erasing_shreds_it(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    url, key_store = stores
    with cl.Ledger.open(settings=settings(url, key_store)) as ledger:
        gone = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(gone, {"role": "user", "content": SECRET})
        kept = ledger.start("You help.", policy=POLICY, subject="user-7")
        ledger.append(kept, {"role": "user", "content": "keep me"})
        fork = ledger.fork(gone, subject="user-7")
        ledger.append(fork, {"role": "user", "content": "the fork's own words"})
        with copy_of(url, tmp_path) as (copy, copied):
            keys = data_keys(key_store)
            assert len(keys) == 2  # user-42 and user-7
            held = key_store_bytes(key_store)
            # The scan finds the keys where they are, and none in the event store's copy.
            assert all(any(form in held for form in forms(key)) for key in keys)
            assert not [key.hex() for key in keys if any(form in copied for form in forms(key))]
            assert SECRET.encode() not in copied
            with cl.Ledger.open(settings=settings(copy, key_store)) as restored:
                assert restored.transcript(gone)[-1].message["content"] == SECRET
            ledger.erase("user-42", "asked")
            with cl.Ledger.open(settings=settings(copy, key_store)) as restored:
                with pytest.raises(cl.ConversationErasedError):
                    restored.transcript(gone)
                assert restored.transcript(kept)[-1].message["content"] == "keep me"
                assert restored.transcript(fork)[-1].message["content"] == "the fork's own words"
    assert len(data_keys(key_store)) == 1


def own_key_tables(url: str) -> list[str]:
    """The key tables in the event store itself."""
    if url.startswith("sqlite"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
            rows = db.execute("SELECT name FROM sqlite_master WHERE name LIKE '%subject%'").fetchall()
    else:
        base, _, schema = url.partition("?schema=")
        with psycopg.connect(base) as conn:
            rows = conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s AND tablename LIKE '%%subject%%'",
                (schema,),
            ).fetchall()
    return [r[0] for r in rows]


@contextmanager
def another(url: str, tmp: Path, name: str) -> Iterator[str]:
    """Another store of ``url``'s kind: an event store (a schema) or a key store (a database)."""
    if url.startswith("sqlite"):
        yield f"sqlite:///{tmp / name}"
    elif name.startswith("keys"):
        with fresh_database() as found:
            yield found
    else:
        with fresh_schema() as found:
            yield found


def test_a_store_is_refused_without_its_key_store_or_with_another(
    stores: tuple[str, str], tmp_path: Path
) -> None:
    url, key_store = stores
    with cl.Ledger.open(settings=settings(url, key_store)) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-1")
        ledger.append(cid, {"role": "user", "content": SECRET})
    with pytest.raises(cl.ConfigurationError, match="keeps its data keys in the key store") as refused:
        cl.Ledger.open(settings=settings(url, None))
    assert refused.value.setting == "key_store"
    assert own_key_tables(url) == []  # nothing was made in the event store
    with (
        another(url, tmp_path, "keys-other.db") as other,
        pytest.raises(cl.ConfigurationError, match=r"another key store|holds no key table"),
    ):
        cl.Ledger.open(settings=settings(url, other))
    with cl.Ledger.open(settings=settings(url, key_store), read_only=True) as reading:
        assert reading.transcript(cid)[-1].message["content"] == SECRET
    # A store that keeps its keys itself is not given a key store (its keys stay).
    with another(url, tmp_path, "plain.db") as plain:
        with cl.Ledger.open(settings=settings(plain, None)) as ledger:
            ledger.append(ledger.start("You help.", subject="user-9"), {"role": "user", "content": "x"})
        with pytest.raises(cl.ConfigurationError, match="keeps its data keys itself"):
            cl.Ledger.open(settings=settings(plain, key_store))


def test_rotation_receipts_export_and_forks_work_with_a_key_store(stores: tuple[str, str]) -> None:
    url, key_store = stores
    old, new = (base64.b64encode(os.urandom(32)).decode() for _ in range(2))
    with cl.Ledger.open(settings=settings(url, key_store, cipher_key=old)) as ledger:
        source = ledger.start("You help.", policy=POLICY, subject="user-1")
        ledger.append(source, {"role": "user", "content": SECRET})
        fork = ledger.fork(source, subject="user-2")
        ledger.append(fork, {"role": "user", "content": "the fork's own words"})
        exported = ledger.export_subject("user-1")
        assert SECRET in json.dumps(exported.to_json())
        keys = subject_keys_of(ledger)
        assert keys is not None
        assert keys.rewrap(old, new) == 2
    with cl.Ledger.open(settings=settings(url, key_store, cipher_key=new)) as ledger:
        assert ledger.transcript(source)[-1].message["content"] == SECRET
        report = ledger.erase("user-1", "asked")
        assert report.receipt is not None
        assert ledger.check_receipt(report.receipt).ok
        assert ledger.verify(fork).ok
        assert ledger.transcript(fork)[-1].message["content"] == "the fork's own words"
        with pytest.raises(cl.ConversationErasedError):
            ledger.export_subject("user-1")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_the_command_line_takes_the_key_store_and_a_restored_store_is_erased_again(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [k for k in os.environ if k.startswith("CONTEXTLEDGER_")]:
        monkeypatch.delenv(name)
    url, key_store = f"sqlite:///{tmp_path / 'ledger.db'}", f"sqlite:///{tmp_path / 'keys.db'}"
    with cl.Ledger.open(settings=settings(url, key_store)) as ledger:
        cid = ledger.start("You help.", policy=POLICY, subject="user-42")
        ledger.append(cid, {"role": "user", "content": SECRET})
    backup = tmp_path / "backup"
    backup.mkdir()
    for path in sqlite_files(url):
        shutil.copyfile(path, backup / path.name)
    code, said = run(capsys, "verify", "--database", url)
    assert code != 0 and "--key-store" in said
    code, said = run(
        capsys,
        "erase",
        "--subject",
        "user-42",
        "--reason",
        "asked",
        "--database",
        url,
        "--key-store",
        key_store,
    )
    assert code == 0, said
    journal = tmp_path / "journal.jsonl"
    code, said = run(
        capsys, "erase", "--export-journal", str(journal), "--database", url, "--key-store", key_store
    )
    assert code == 0, said
    # The store restored from the backup taken before the erasure: its keys were never
    # in it, so it reads nothing of the subject even before the erasure is made again.
    for path in sqlite_files(url):
        path.unlink()
    for path in backup.iterdir():
        shutil.copyfile(path, tmp_path / path.name)
    monkeypatch.setenv("CONTEXTLEDGER_KEY_STORE", key_store)
    with (
        cl.Ledger.open(settings=cl.Settings.from_env(database_url=url, run_policy=False)) as restored,
        pytest.raises(cl.ConversationErasedError),
    ):
        restored.transcript(cid)
    code, said = run(capsys, "erase", "--reapply", str(journal), "--database", url)
    assert code == 0, said
    code, said = run(capsys, "verify", "--database", url, "--json")
    assert code == 0, said


@pytest.mark.parametrize(
    ("database", "key_store", "said"),
    [
        (
            "sqlite:///{tmp}/ledger.db",
            "postgresql://postgres@127.0.0.1:5432/keys",
            "of the event store's kind",
        ),
        ("memory://", "sqlite:///{tmp}/keys.db", "of the event store's kind"),
        ("sqlite:///{tmp}/ledger.db", "sqlite:///{tmp}/ledger.db", "the event store itself"),
        ("sqlite:///{tmp}/ledger.db", "sqlite:///{tmp}/no/such/folder/keys.db", "does not exist"),
        (ADMIN + "?schema=a", ADMIN + "?schema=b", "another PostgreSQL database"),
    ],
)
def test_a_key_store_that_cannot_be_one_is_refused_before_anything_is_made(
    tmp_path: Path, database: str, key_store: str, said: str
) -> None:
    with pytest.raises(cl.ConfigurationError, match=said) as refused:
        cl.Ledger.open(settings=settings(database.format(tmp=tmp_path), key_store.format(tmp=tmp_path)))
    assert refused.value.setting == "key_store"
    assert list(tmp_path.iterdir()) == []


def test_the_key_store_password_is_never_shown() -> None:
    shown = repr(cl.Settings(key_store="postgresql://keeper:s3cret-pw@127.0.0.1:5432/keys"))
    assert "keeper" in shown and "s3cret-pw" not in shown


def test_stores_given_one_key_store_share_it_and_erase_once(tmp_path: Path) -> None:
    urls = (f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}")
    key_store = f"sqlite:///{tmp_path / 'keys.db'}"
    shared = cl.Settings(stores=urls, key_store=key_store, run_policy=False)
    with cl.Ledger.open(settings=shared) as ledger:
        cids = [ledger.start("You help.", policy=POLICY, subject="user-1") for _ in range(6)]
        for cid in cids:
            ledger.append(cid, {"role": "user", "content": SECRET})
        assert len({cid for cid in cids if ledger.subject_of(cid) == "user-1"}) == 6
        held = len(data_keys(key_store))  # user-1's, and the stores' placement records'
        report = ledger.erase("user-1", "asked")
        assert set(report.conversations) == set(cids)
        assert report.receipt is not None and ledger.check_receipt(report.receipt).ok
        assert ledger.verify().ok
    assert len(data_keys(key_store)) == held - 1  # one key for both stores, destroyed once
    for url in urls:  # each store is linked to the key store, and holds no key table
        assert own_key_tables(url) == []
        with pytest.raises(cl.ConfigurationError, match="keeps its data keys in the key store"):
            cl.Ledger.open(settings=settings(url, None))


def test_keys_show_gives_the_layout(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    url, key_store = f"sqlite:///{tmp_path / 'ledger.db'}", f"sqlite:///{tmp_path / 'keys.db'}"
    with cl.Ledger.open(settings=settings(url, key_store)) as ledger:
        ledger.append(ledger.start("You help.", subject="user-1"), {"role": "user", "content": "x"})
    code, said = run(capsys, "keys", "show", "--json", "--database", url, "--key-store", key_store)
    assert code == 0, said
    found = json.loads(said)
    assert found["key_store"] == key_store
    assert found["key_tables"] == [{"where": key_store, "data_keys": 1, "wrapped": False}]
    assert "does not hold" in found["backup_of_event_store_holds"]
    code, said = run(capsys, "keys", "show", "--database", url)
    assert code != 0 and "--key-store" in said


def test_an_erasure_cut_off_after_its_tombstone_is_reported_and_completed_by_erasing_again(
    stores: tuple[str, str],
) -> None:
    url, key_store = stores
    with cl.Ledger.open(settings=settings(url, key_store)) as ledger:
        gone = ledger.start("You help.", policy=POLICY, subject="user-1")
        ledger.append(gone, {"role": "user", "content": SECRET})
        keys = subject_keys_of(ledger)
        assert keys is not None
        keys.tombstone("user-1", "asked")  # the erasure's first step, in the key store; then a crash
    with cl.Ledger.open(settings=settings(url, key_store)) as ledger:
        with pytest.raises(cl.ConversationErasedError):
            ledger.transcript(gone)
        report = ledger.verify()
        assert not report.ok and report.erased == (gone,)
        assert "no ContentErased record" in report.problems[0].problem
        again = ledger.erase("user-1", "asked")
        assert not again.already_erased and again.conversations == (gone,)
        assert ledger.verify().ok
