"""A ledger opened read-only creates nothing, writes nothing and refuses every write
with ``ReadOnlyError``; every read command runs with a PostgreSQL role that may only
``SELECT``, and a store without its tables (a mistyped path, schema or database) is
``SchemaMissingError`` naming what is missing, never "OK: 0 conversations"."""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import sqlite3
import tempfile
import urllib.request
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

import contextledger as cl
from contextledger.application.facade.read_only import READING, WRITING
from contextledger.infrastructure.cli import main
from tests.conftest import POSTGRES_URL
from tests.support.privileges import as_nobody
from tests.support.viewer import serve

#: A message any write could be given: the refusal comes before any check of it.
_MESSAGE = {"role": "user", "content": "hi"}


def _fill(url: str) -> uuid.UUID:
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("You are terse.", key="chat-ro")
        for i in range(4):
            ledger.append(cid, {"role": "user", "content": f"question {i}"})
            ledger.append(cid, {"role": "assistant", "content": f"answer {i}"})
        return cid


def _event_rows_sqlite(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return int(conn.execute("SELECT count(*) FROM stored_events").fetchone()[0])


def test_every_public_method_of_the_ledger_is_known_to_read_or_to_write() -> None:
    public = {name for name, _ in inspect.getmembers(cl.Ledger) if not name.startswith("_")}
    constants = {
        "name",
        "snapshot_class",
        "log_section_size",
        "env",
        "log",
        "notification_log",
        "repository",
        "snapshotting_intervals",
        "snapshotting_projectors",
        "notify_topics",
        "AGGREGATE_CACHE_FASTFORWARD",
        "AGGREGATE_CACHE_FASTFORWARD_SKIPPING",
        "AGGREGATE_CACHE_MAXSIZE",
        "DEEPCOPY_FROM_AGGREGATE_CACHE",
    }
    unknown = sorted(public - READING - WRITING - constants)
    assert unknown == [], f"classify these in application/facade/read_only.py: {unknown}"
    assert not READING & WRITING


def test_a_read_only_ledger_reads_everything_and_refuses_every_write(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    cid = _fill(url)
    rows = _event_rows_sqlite(path)
    with cl.Ledger.open(url, read_only=True) as ledger:
        assert ledger.conversation_ids() == [cid]
        assert ledger.verify().ok and ledger.verify().messages == 8
        assert ledger.context("chat-ro")[-1] == {"role": "assistant", "content": "answer 3"}
        assert len(ledger.transcript(cid)) == 8 and ledger.totals().messages == 8
        assert ledger.idle_conversations(30) == []  # retention's look reads only
        assert ledger.background.runner is None  # no policy thread
        for operation in sorted(WRITING):
            with pytest.raises(cl.ReadOnlyError) as caught:
                getattr(ledger, operation)(cid, _MESSAGE)
            assert caught.value.operation == operation and isinstance(caught.value, cl.UsageError)
            assert "read-only" in str(caught.value)
    assert _event_rows_sqlite(path) == rows


def test_a_read_only_ledger_asked_to_run_the_policy_is_a_configuration_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    _fill(url)
    with pytest.raises(cl.ConfigurationError) as caught:
        cl.Ledger.open(url, read_only=True, run_policy=True)
    assert caught.value.setting == "run_policy"


def test_a_read_only_sqlite_file_the_process_may_not_write_is_read(tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    cid = _fill(f"sqlite:///{path}")
    with sqlite3.connect(path) as conn:  # fold the WAL in, so the file alone holds the log
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    path.chmod(0o444)
    with cl.Ledger.open(f"sqlite:///{path}", read_only=True) as ledger:
        assert ledger.conversation_ids() == [cid] and ledger.verify().ok
        with pytest.raises(cl.ReadOnlyError):
            ledger.append(cid, {"role": "user", "content": "more"})


def test_every_read_command_runs_on_a_sqlite_file_the_process_may_not_write(
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = Path(tempfile.mkdtemp(prefix="cl-read-only-", dir="/tmp"))
    try:
        url = f"sqlite:///{folder / 'ledger.db'}"
        cid = _fill(url)
        commands: list[list[str]] = [
            ["verify"],
            ["list"],
            ["transcript", str(cid)],
            ["context", str(cid)],
            ["replay", str(cid)],
            ["replay", "--all"],
            ["export"],
            ["stats"],
            ["stats", str(cid)],
        ]
        for argv in commands:  # once as root: every module the commands use is loaded
            assert main([*argv, "--database", url]) == 0
        for path in folder.iterdir():
            path.chmod(0o444)
        folder.chmod(0o555)  # nothing can be created beside it either
        capsys.readouterr()
        with as_nobody():
            codes = {" ".join(argv): main([*argv, "--database", url]) for argv in commands}
        assert codes == dict.fromkeys(codes, 0), capsys.readouterr().err
        assert "verify OK: 1 conversation," in capsys.readouterr().out
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)


def test_a_mistyped_sqlite_path_is_named_and_never_created(tmp_path: Path) -> None:
    typo = tmp_path / "ledgr.db"
    with pytest.raises(cl.SchemaMissingError) as caught:
        cl.Ledger.open(f"sqlite:///{typo}", read_only=True)
    assert str(typo) in str(caught.value) and caught.value.cause == "database_missing"
    assert not typo.exists()
    assert main(["verify", "--database", f"sqlite:///{typo}"]) == 2
    assert not typo.exists()


def test_a_sqlite_file_without_the_tables_is_named_not_reported_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(cl.SchemaMissingError) as caught:
        cl.Ledger.open(f"sqlite:///{other}", read_only=True)
    assert caught.value.table == "stored_events"
    assert main(["verify", "--database", f"sqlite:///{other}"]) == 1
    err = capsys.readouterr().err
    assert "no table stored_events" in err and "OK" not in err
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]


def test_read_only_reaches_every_store_of_a_sharded_ledger_and_the_async_one(tmp_path: Path) -> None:
    urls = [f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"]
    with cl.Ledger.open(urls, run_policy=False) as ledger:
        ids = [ledger.start("Be brief.") for _ in range(6)]
    with cl.Ledger.open(urls, read_only=True) as ledger:
        assert sorted(ledger.conversation_ids()) == sorted(ids)
        for shard in ledger.shards:
            with pytest.raises(cl.ReadOnlyError):
                shard.append(ids[0], {"role": "user", "content": "hi"})

    async def run() -> None:
        async with cl.AsyncLedger.open(urls, read_only=True) as ledger:
            assert len(await ledger.conversation_ids()) == 6
            with pytest.raises(cl.ReadOnlyError):
                await ledger.append(ids[0], {"role": "user", "content": "hi"})

    asyncio.run(run())


# -- PostgreSQL: a role that may only SELECT --------------------------------------------


@contextmanager
def _reader(postgres_url: str, *, read_models: bool = False) -> Iterator[tuple[str, uuid.UUID]]:
    """A filled store (with ``read_models``: a worker made them first), and the URL of
    a role with USAGE on its schema and SELECT on its tables, nothing more."""
    cid = _fill(postgres_url)
    if read_models:
        assert main(["worker", "--once", "--database", postgres_url]) == 0
    schema = postgres_url.split("schema=")[1]
    role = f"cl_reader_{uuid.uuid4().hex[:10]}"
    admin = psycopg.connect(POSTGRES_URL.split("?")[0], autocommit=True)
    try:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        admin.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        yield postgres_url.replace("postgresql://postgres@", f"postgresql://{role}@"), cid
    finally:
        admin.execute(f'DROP OWNED BY "{role}"')
        admin.execute(f'DROP ROLE "{role}"')
        admin.close()


@pytest.fixture
def select_only(postgres_url: str) -> Iterator[tuple[str, uuid.UUID]]:
    with _reader(postgres_url) as reader:
        yield reader


@pytest.fixture
def select_only_with_read_models(postgres_url: str) -> Iterator[tuple[str, uuid.UUID]]:
    with _reader(postgres_url, read_models=True) as reader:
        yield reader


def _tables(postgres_url: str) -> list[str]:
    schema = postgres_url.split("schema=")[1]
    with psycopg.connect(POSTGRES_URL.split("?")[0]) as conn:
        rows = conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s ORDER BY 1", (schema,))
        return [r[0] for r in rows]


@pytest.mark.postgres
def test_every_read_command_runs_with_a_select_only_role(
    select_only: tuple[str, uuid.UUID],
    postgres_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url, cid = select_only
    before = _tables(postgres_url)
    commands: list[list[str]] = [
        ["verify"],
        ["verify", str(cid)],
        ["list"],
        ["transcript", str(cid)],
        ["context", str(cid)],
        ["context", "chat-ro", "--version", "3"],
        ["replay", str(cid)],
        ["replay", "--all"],
        ["export"],
        ["export", str(cid)],
        ["stats"],
        ["stats", str(cid)],
        ["stats", "--json"],
    ]
    for argv in commands:
        code = main([*argv, "--database", url])
        out = capsys.readouterr()
        assert code == 0, f"{argv}: {out.err}"
    assert main(["stats", "--json", "--database", url]) == 0
    assert json.loads(capsys.readouterr().out)["messages"] == 8
    assert main(["verify", "--database", url]) == 0
    assert "verify OK: 1 conversation," in capsys.readouterr().out
    with serve(url, cwd=tmp_path) as base:
        with urllib.request.urlopen(f"{base}/conversations.json") as page:
            listed = json.loads(page.read())
        with urllib.request.urlopen(f"{base}/conversations/{cid}") as page:
            assert page.status == 200
    assert str(cid) in json.dumps(listed)
    assert _tables(postgres_url) == before  # no read-model table, nothing created


@pytest.mark.postgres
def test_a_select_only_role_reads_caught_up_read_models(
    select_only_with_read_models: tuple[str, uuid.UUID], capsys: pytest.CaptureFixture[str]
) -> None:
    url, _ = select_only_with_read_models
    assert main(["stats", "--json", "--database", url]) == 0
    found = json.loads(capsys.readouterr().out)
    assert found["source"] == "token_totals read model" and found["messages"] == 8
    assert main(["list", "--json", "--database", url]) == 0
    assert [r["key"] for r in json.loads(capsys.readouterr().out)] == ["chat-ro"]


@pytest.mark.postgres
def test_the_select_only_role_is_refused_every_write_by_the_ledger_and_by_the_server(
    select_only: tuple[str, uuid.UUID],
) -> None:
    url, cid = select_only
    with cl.Ledger.open(url, read_only=True) as ledger:
        assert ledger.verify().ok
        with pytest.raises(cl.ReadOnlyError):
            ledger.append(cid, {"role": "user", "content": "more"})
        # Underneath, the session itself is read-only: a write that bypassed the
        # ledger would fail in the server, not land.
        with ledger.recorder.datastore.get_connection() as conn:  # type: ignore[attr-defined]
            row = conn.execute("SHOW default_transaction_read_only").fetchone()
        assert row["default_transaction_read_only"] == "on"
    assert main(["close-tool-calls", str(cid), "--database", url]) != 0  # a write command


@pytest.mark.postgres
def test_an_empty_or_mistyped_postgres_schema_is_named_and_nothing_is_created(
    postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(cl.SchemaMissingError) as caught:
        cl.Ledger.open(postgres_url, read_only=True)
    assert caught.value.table == "contextledger_events"
    for command in (["verify"], ["list"], ["stats"], ["export"]):
        assert main([*command, "--database", postgres_url]) == 1
        err = capsys.readouterr().err
        assert "has no table" in err and "contextledger_events" in err and "OK" not in err
    assert _tables(postgres_url) == []
    typo = postgres_url + "x"
    with pytest.raises(cl.SchemaMissingError) as schema:
        cl.Ledger.open(typo, read_only=True)
    assert schema.value.schema == postgres_url.split("schema=")[1] + "x"
    assert "has no schema" in str(schema.value)


def test_stats_and_list_read_the_read_models_when_caught_up_else_the_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "ledger.db"
    url = f"sqlite:///{path}"
    cid = _fill(url)
    views = path.with_name("ledger.views.db")
    assert main(["stats", "--json", "--database", url]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["source"] == "log" and first["messages"] == 8
    assert main(["list", "--json", "--database", url]) == 0
    from_log = json.loads(capsys.readouterr().out)
    assert not views.exists()  # a command that only reads made no read models
    assert main(["worker", "--once", "--database", url]) == 0
    capsys.readouterr()
    assert main(["stats", "--json", "--database", url]) == 0
    caught_up = json.loads(capsys.readouterr().out)
    assert caught_up == {**first, "source": "token_totals read model"}
    assert main(["list", "--json", "--database", url]) == 0
    assert json.loads(capsys.readouterr().out) == from_log  # the same rows, either way
    with cl.Ledger.open(url, run_policy=False) as ledger:
        ledger.append(cid, {"role": "user", "content": "one more"})
    assert main(["stats", "--json", "--database", url]) == 0
    behind = json.loads(capsys.readouterr().out)
    assert behind["source"] == "log" and behind["messages"] == 9
    assert main(["list", "--json", "--database", url]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(r["conversation_id"], r["messages"], r["key"]) for r in listed] == [(str(cid), 9, "chat-ro")]
