"""Each layer exports its public names explicitly, and they all resolve."""

from __future__ import annotations

import importlib

import pytest


@pytest.mark.parametrize("module", ["contextledger.domain", "contextledger.application",
                                    "contextledger.infrastructure"])
def test_every_exported_name_exists_once(module: str) -> None:
    mod = importlib.import_module(module)
    exported = mod.__all__
    assert len(exported) == len(set(exported))
    missing = [name for name in exported if not hasattr(mod, name)]
    assert missing == []


def test_the_documented_entry_points_are_exported() -> None:
    from contextledger.application import Ledger, ReductionPolicy

    for name in ("open", "start", "append", "context", "transcript", "totals", "summaries", "wait_idle"):
        assert callable(getattr(Ledger, name))
    assert ReductionPolicy(trigger_messages=100, keep_messages=10).keep_messages == 10


def test_every_error_descends_from_the_one_root() -> None:
    import contextledger.domain.errors as errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ContextLedgerError)


def test_the_error_tree_in_the_docs_is_the_one_in_the_code() -> None:
    from pathlib import Path

    import contextledger.domain.errors as errors

    drawn = errors.__doc__.split("::\n\n", 1)[1].split("\n\nEvery error", 1)[0]
    drawn = "\n".join(line[4:] for line in drawn.splitlines())
    docs = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    assert drawn in docs
    for name in errors.__all__:
        assert name in drawn, f"{name} is missing from the drawn tree"
