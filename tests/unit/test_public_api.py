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
