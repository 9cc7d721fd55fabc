"""The contract example of docs/testing.md is a working test module: pytest, run on it
as a user would, collects the three suites (and no base class) and they pass. The
first example type-checks under mypy --strict, as the page says (in the suite's one
mypy run, tests/support/typecheck.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.support.typecheck import first_block_of_the_testing_page, lines_about, summary

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "testing.md"


def blocks() -> list[str]:
    found: list[str] = re.findall(
        r"^```python[ \t]*\n(.*?)^```[ \t]*$", PAGE.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL
    )
    return found


def contract_example() -> str:
    [example] = [block for block in blocks() if "contextledger.testing.contracts" in block]
    return example


def test_the_first_example_type_checks_under_mypy_strict(strict_mypy_output: str) -> None:
    first = blocks()[0]
    assert "FakeOpenAIServer" in first and "working_memory" in first
    assert first_block_of_the_testing_page() == first  # the block the suite's mypy run checks
    summary(strict_mypy_output)  # mypy finished its run
    assert lines_about(strict_mypy_output, "testing_page_example.py") == [], strict_mypy_output


def test_the_documented_contract_suites_run_and_pass_under_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_my_adapters.py").write_text(contract_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTLEDGER_", "OPENAI_", "PYTEST_"))}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "-rA",
            "test_my_adapters.py",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.findall(r"^PASSED test_my_adapters.py::(\w+)::", result.stdout, re.MULTILINE)
    assert sorted(set(passed)) == ["TestFirstWords", "TestMyStore", "TestWordCounter"]
    assert len(passed) == 6 + 4 + 12  # summarizer, token counter, ledger
