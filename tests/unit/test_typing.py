"""The three layers and the testing package type-check under mypy --strict (run on the
installed names), in the suite's one mypy run (tests/support/typecheck.py)."""

from __future__ import annotations

from tests.support.typecheck import files, lines_outside, summary


def test_the_package_is_mypy_strict_clean(strict_mypy_output: str) -> None:
    # 0: clean, 1: errors were found (the wrong snippet has one); 2 would be a crash.
    assert strict_mypy_output.startswith(("exit status 0", "exit status 1")), strict_mypy_output
    summary(strict_mypy_output)  # mypy finished its run
    assert lines_outside(strict_mypy_output, list(files())) == [], strict_mypy_output
