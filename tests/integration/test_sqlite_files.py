"""A SQLite path that cannot be a store -- a text file, a directory, a path in a missing
folder, a file the process may not read -- is a typed error naming the path, from the
library and from the command line, and is left as it was."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.infrastructure.cli import main
from tests.support.privileges import as_nobody


def _text_file(folder: Path) -> Path:
    path = folder / "notes.db"
    path.write_text("these are my notes, not a database\n" * 20)
    return path


def _directory(folder: Path) -> Path:
    path = folder / "ledger.db"
    path.mkdir()
    return path


def _in_missing_folder(folder: Path) -> Path:
    return folder / "no-such-folder" / "ledger.db"


CASES: dict[str, tuple[Callable[[Path], Path], type[cl.ContextLedgerError], str]] = {
    "text file": (_text_file, cl.StoreError, "is not a SQLite database"),
    "directory": (_directory, cl.StoreError, "is a directory, not a SQLite database file"),
    "missing folder": (_in_missing_folder, cl.ConfigurationError, "the folder of the SQLite file does not exist"),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
def test_a_path_that_cannot_be_a_store_is_a_typed_error_naming_it(
    case: str, read_only: bool, tmp_path: Path
) -> None:
    make, error, words = CASES[case]
    path = make(tmp_path)
    before = sorted(p.name for p in tmp_path.rglob("*"))
    with pytest.raises(error) as caught:
        cl.Ledger.open(f"sqlite:///{path}", run_policy=False,
                       read_only=read_only)
    assert words in str(caught.value)
    assert str(path if case != "missing folder" else path.parent) in str(caught.value)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before  # nothing created


@pytest.mark.parametrize("case", ["text file", "directory"])
@pytest.mark.parametrize("command", [["verify"], ["list"], ["stats"], ["worker", "--once"], ["rebuild"]])
def test_the_command_line_names_the_path_in_one_line(
    case: str, command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make, _, words = CASES[case]
    path = make(tmp_path)
    assert main([*command, "--database", f"sqlite:///{path}"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and str(path) in err
    assert "unexpected" not in err and "DatabaseError" not in err


def test_a_file_the_process_may_not_read_is_named_as_unreadable() -> None:
    folder = Path(tempfile.mkdtemp(prefix="cl-unreadable-", dir="/tmp"))
    try:
        folder.chmod(0o777)  # the unprivileged user may enter it
        path = folder / "ledger.db"
        with cl.Ledger.open(f"sqlite:///{path}", run_policy=False) as ledger:
            ledger.start("You are terse.")  # every module the open needs is loaded now
        path.chmod(0o000)
        for read_only in (False, True):
            with as_nobody(), pytest.raises(cl.StoreError) as caught:
                cl.Ledger.open(f"sqlite:///{path}", run_policy=False,
                               read_only=read_only)
            assert caught.value.cause == "unreadable"
            assert f"cannot read the SQLite file {path}" in str(caught.value)
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("command", [["rebuild"], ["worker", "--once"]])
def test_a_read_models_file_that_is_not_a_database_is_named(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        ledger.start("You are terse.")
    views = tmp_path / "ledger.views.db"
    views.write_text("not the read models\n")
    assert main([*command, "--database", url]) == 1
    err = capsys.readouterr().err
    assert f"{views} is not a SQLite database" in err and "DatabaseError" not in err
    assert views.read_text() == "not the read models\n"
    with pytest.raises(cl.StoreError, match="is not a SQLite database"):
        cl.SQLReadModels.for_url(url)
