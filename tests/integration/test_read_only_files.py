"""A read-only ledger creates and leaves no file: not the read models' ``*.views.db``
(``attach_read_models`` is refused first, ``SQLReadModels.for_ledger`` opens an
existing file read-only, or says it is missing), and no ``-wal``/``-shm`` beside the
store or its read models once it is closed; the files keep their bytes and times."""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.infrastructure.readmodels import SQLReadModels, attach_read_models
from tests.support.privileges import as_nobody


def files(folder: Path) -> dict[str, tuple[int, str]]:
    """Each file of ``folder``: its modification time and a digest of its bytes."""
    return {
        p.name: (p.stat().st_mtime_ns, hashlib.sha256(p.read_bytes()).hexdigest())
        for p in sorted(folder.iterdir())
    }


def test_a_read_only_ledger_makes_no_read_models_file(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("You help.")
    before = files(tmp_path)
    assert list(before) == ["ledger.db"]
    with cl.Ledger.open(url, read_only=True) as ledger:
        with pytest.raises(cl.ReadOnlyError) as refused:
            attach_read_models(ledger)
        assert refused.value.operation == "attach_read_models"
        with pytest.raises(cl.SchemaMissingError):
            SQLReadModels.for_ledger(ledger)
        assert ledger.transcript(cid) == []
    assert files(tmp_path) == before


def test_read_only_opens_leave_no_wal_or_shm_and_change_no_byte(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        attach_read_models(ledger)
        cid = ledger.start("You help.")
        ledger.append(cid, {"role": "user", "content": "hello"})
        ledger.wait_idle()
    before = files(tmp_path)
    assert sorted(before) == ["ledger.db", "ledger.views.db"]
    with cl.Ledger.open(url, read_only=True) as ledger:
        assert ledger.transcript(cid)[0].message["content"] == "hello"
        models = SQLReadModels.for_ledger(ledger)
        try:
            assert [e.position for e in models.transcript.transcript(cid)] == [0]
        finally:
            models.close()
    assert files(tmp_path) == before


def test_a_writer_keeps_its_wal_while_a_read_only_ledger_closes(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with cl.Ledger.open(url, run_policy=False) as writer:
        cid = writer.start("You help.")
        with cl.Ledger.open(url, read_only=True) as reader:
            assert reader.transcript(cid) == []
        assert (tmp_path / "ledger.db-wal").exists()  # the writer's, still in use
        writer.append(cid, {"role": "user", "content": "after the reader closed"})
    with cl.Ledger.open(url, read_only=True) as reader:
        assert reader.transcript(cid)[0].message["content"] == "after the reader closed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ledger.db"]


def test_a_store_and_its_read_models_in_a_folder_nobody_may_write_are_read() -> None:
    folder = Path(tempfile.mkdtemp(prefix="cl-read-only-", dir="/tmp"))  # nobody can reach /tmp
    try:
        url = f"sqlite:///{folder / 'ledger.db'}"
        with cl.Ledger.open(url, run_policy=False) as ledger:
            attach_read_models(ledger)
            cid = ledger.start("You help.")
            ledger.append(cid, {"role": "user", "content": "hello"})
            ledger.wait_idle()
        for path in folder.iterdir():
            path.chmod(0o444)
        folder.chmod(0o555)  # no -wal or -shm can be made beside them
        before = files(folder)
        with as_nobody(), cl.Ledger.open(url, read_only=True) as ledger:
            assert ledger.transcript(cid)[0].message["content"] == "hello"
            models = SQLReadModels.for_ledger(ledger)
            try:
                assert [e.position for e in models.transcript.transcript(cid)] == [0]
            finally:
                models.close()
        assert files(folder) == before
    finally:
        folder.chmod(0o755)
        shutil.rmtree(folder)
