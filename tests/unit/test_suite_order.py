"""The suite's order (tests/support/suite_order.py): it only reorders, never drops."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.suite_order import load_durations, run_order

IDS = [
    "tests/unit/test_a.py::test_one",
    "tests/unit/test_a.py::test_two",
    "tests/e2e/test_b.py::test_one[x]",
    "tests/e2e/test_b.py::test_one[y]",
    "tests/unit/test_typing.py::test_strict",
    "tests/integration/test_new.py::test_one",
    "tests/unit/test_c.py::test_one",
]
DURATIONS = {
    "tests/unit/test_a.py": 1.0,
    "tests/e2e/test_b.py": 30.0,
    "tests/unit/test_c.py": 5.0,
    "tests/unit/test_typing.py": 60.0,
}


def test_modules_run_longest_first_an_unknown_one_first_and_the_mypy_readers_last() -> None:
    last = [nodeid.startswith("tests/unit/test_typing.py") for nodeid in IDS]
    order = [IDS[i] for i in run_order(IDS, DURATIONS, last)]
    assert order == [
        "tests/integration/test_new.py::test_one",  # not in the file: first
        "tests/e2e/test_b.py::test_one[x]",  # 30 s, in collection order
        "tests/e2e/test_b.py::test_one[y]",
        "tests/unit/test_c.py::test_one",
        "tests/unit/test_a.py::test_one",
        "tests/unit/test_a.py::test_two",
        "tests/unit/test_typing.py::test_strict",  # reads the mypy run: last, whatever its time
    ]


def test_without_durations_the_collection_order_stands() -> None:
    assert run_order(IDS, {}, [False] * len(IDS)) == list(range(len(IDS)))


def test_the_durations_file_lists_seconds_per_module() -> None:
    durations = load_durations()
    assert durations, "tests/durations.json is missing or empty"
    root = Path(__file__).resolve().parents[2]
    assert all(module.startswith("tests/") and module.endswith(".py") for module in durations)
    assert all(seconds >= 0 for seconds in durations.values())
    assert (root / "tests" / "durations.json").is_file()


def test_the_collected_suite_is_every_test_once(request: pytest.FixtureRequest) -> None:
    ids = [item.nodeid for item in request.session.items]
    assert len(ids) == len(set(ids))
