"""The order the suite runs in, so that the xdist workers finish together.

With ``-n`` xdist hands the tests to the workers in collection order. In the order
of the folders, the longest tests (property searches, fault tests with servers of
their own) came late, and the run ended with one worker still busy with them while
the other had nothing left. This plugin (loaded by tests/conftest.py) reorders what
was collected:

- test modules run longest first, by their durations in ``tests/durations.json``
  (seconds per module, written by ``pytest --store-durations``); a module missing from
  it runs first, where its time can still be balanced against the rest;
- within a module the tests keep pytest's order, so that a worker builds a module's
  fixtures (a server, a ledger per store) once;
- the tests that read the suite's one ``mypy --strict`` run (the ``strict_mypy_output``
  fixture) run last: it runs in the background from the start (tests/conftest.py), so
  by then they read its output without waiting;
- workers are handed one test at a time (``--maxschedchunk=1``, unless given): the
  next test goes to whichever worker is free first, and the last tests are the short
  ones.

The order changes no test: each still runs once, with its own fixtures. The durations
file only steers the order: a stale one makes the run slower, never wrong. After a
change that moves the time a lot, write it again from a whole run:
``.venv/bin/python -m pytest -n 3 -q --store-durations``.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
#: Tests that read the background mypy run.
LAST_FIXTURE = "strict_mypy_output"


def module_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def load_durations(path: Path = DURATIONS) -> dict[str, float]:
    """Seconds per test module (empty when the file is missing or unreadable)."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in raw.items() if isinstance(v, int | float)}


def run_order(nodeids: Sequence[str], durations: Mapping[str, float], last: Sequence[bool]) -> list[int]:
    """The indexes of ``nodeids`` in the order to run them: modules longest first (an
    unknown one first of all), collection order within a module, and the tests marked
    in ``last`` after everything else."""

    def key(index: int) -> tuple[bool, float, int]:
        return (last[index], -durations.get(module_of(nodeids[index]), math.inf), index)

    return sorted(range(len(nodeids)), key=key)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write the duration of each test module that ran into tests/durations.json "
        "(what orders the suite; see tests/support/suite_order.py)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # xdist's default hands out chunks of consecutive tests; one at a time lets the
    # longest-first order balance the workers (None: not given on the command line).
    if hasattr(config.option, "maxschedchunk") and config.option.maxschedchunk is None:
        config.option.maxschedchunk = 1
    if config.getoption("store_durations") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_DurationRecorder(config), "contextledger-durations")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    durations = load_durations()
    last = [LAST_FIXTURE in getattr(item, "fixturenames", ()) for item in items]
    order = run_order([item.nodeid for item in items], durations, last)
    items[:] = [items[i] for i in order]


class _DurationRecorder:
    """Adds up each module's setup, call and teardown times; writes them at the end
    (in the process that reports: the xdist controller, or the only process)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[module_of(report.nodeid)] += report.duration

    def pytest_sessionfinish(self) -> None:
        merged = {**load_durations(), **{m: round(s, 1) for m, s in self.seconds.items()}}
        ordered = dict(sorted(merged.items(), key=lambda kv: (-kv[1], kv[0])))
        DURATIONS.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
