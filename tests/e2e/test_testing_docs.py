"""The contract example of docs/testing.md is a working test module: pytest, run on it
as a user would, collects the three suites (and no base class) and they pass. The
first example type-checks under mypy --strict, as the page says."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "testing.md"
#: mypy's cache, kept between runs (gitignored): the SDKs' types are analysed once.
MYPY_CACHE = REPO / ".mypy_cache" / "test_testing_docs"


def blocks() -> list[str]:
    found: list[str] = re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", PAGE.read_text(encoding="utf-8"),
                                  re.MULTILINE | re.DOTALL)
    return found


def contract_example() -> str:
    [example] = [block for block in blocks() if "contextledger.testing.contracts" in block]
    return example


def test_the_first_example_type_checks_under_mypy_strict(tmp_path: Path) -> None:
    first = blocks()[0]
    assert "FakeOpenAIServer" in first and "working_memory" in first
    (tmp_path / "example.py").write_text(first, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--cache-dir", str(MYPY_CACHE),
         "example.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_documented_contract_suites_run_and_pass_under_pytest(tmp_path: Path) -> None:
    (tmp_path / "test_my_adapters.py").write_text(contract_example(), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CONTEXTLEDGER_", "OPENAI_", "PYTEST_"))}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rA",
         "test_my_adapters.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.findall(r"^PASSED test_my_adapters.py::(\w+)::", result.stdout, re.MULTILINE)
    assert sorted(set(passed)) == ["TestFirstWords", "TestMyStore", "TestWordCounter"]
    assert len(passed) == 6 + 4 + 12  # summarizer, token counter, ledger
