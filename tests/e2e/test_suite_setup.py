"""How this project's own suite behaves where it runs (docs/testing.md, "This
project's tests"): an unreachable PostgreSQL fails the PostgreSQL tests unless the run
opts out, and the conversation corpora are always there to test with."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.support import processes

REPO = Path(__file__).resolve().parents[2]
#: One quick test that needs the PostgreSQL fixture.
POSTGRES_TEST = "tests/integration/test_idempotency.py::test_the_async_twin[postgres]"


def run_suite(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CI", "CONTEXTLEDGER_SKIP_POSTGRES") and not k.startswith("PYTEST_")
    }
    return run_forked(["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-rfs", *args], {**environ, **env})


def _pytest_main(args: list[str], env: dict[str, str], out: str, err: str) -> None:
    """``pytest ARGS`` in this (forked) process, in the checkout (``as_command``), its
    exit status pytest's."""
    processes.as_command(env, REPO, out, err)
    sys.argv = ["pytest", *args]
    import pytest

    code: int = 1
    try:
        code = int(pytest.main(args))
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(code)


def run_forked(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """A pytest run of the checkout's tests in a process of its own, forked from the
    tests' forkserver (tests/support/processes.py: pytest, the package and its drivers
    already imported, nothing of this session's state) instead of a new interpreter;
    what ``subprocess.run`` with ``capture_output=True, text=True`` returns. ``env``:
    its whole environment, read by the suite's conftest as it is imported there.
    A run in another folder (a clone, with a ``tests`` package of its own) starts a
    new interpreter instead: a forked one has this checkout's ``tests`` imported."""
    with tempfile.TemporaryDirectory(prefix="cl-pytest-") as folder:
        out, err = str(Path(folder) / "stdout"), str(Path(folder) / "stderr")
        ctx: Any = processes.process_context()  # typeshed's BaseContext names no Process
        process = ctx.Process(target=_pytest_main, args=(args, env, out, err))
        process.start()
        process.join(600)
        if process.is_alive():
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(["pytest", *args], 600)
        return subprocess.CompletedProcess(
            ["pytest", *args],
            process.exitcode if process.exitcode is not None else -1,
            Path(out).read_text(),
            Path(err).read_text(),
        )


def _pytest_args(*args: str) -> list[str]:
    """The arguments of a pytest run of the suite's own tests: quiet, one process, no
    cache and no random order, so that its output is read as the test expects."""
    return ["-q", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly", *args]


def _pytest(*args: str) -> list[str]:
    """Such a pytest run as a new interpreter's command line."""
    return [sys.executable, "-m", "pytest", *_pytest_args(*args)]


def test_an_unreachable_postgres_fails_the_run() -> None:
    result = run_suite(
        POSTGRES_TEST, CONTEXTLEDGER_TEST_POSTGRES_URL="postgresql://postgres:pw@127.0.0.1:1/test"
    )
    assert result.returncode == 1, result.stdout[-3000:]
    assert "1 failed" in result.stdout and "skipped" not in result.stdout
    assert "PostgreSQL is unreachable at postgresql://postgres:***@127.0.0.1:1/test" in result.stdout
    assert "CONTEXTLEDGER_SKIP_POSTGRES=1" in result.stdout and ":pw@" not in result.stdout


def test_the_postgres_tests_are_skipped_only_when_asked() -> None:
    url = "postgresql://postgres@127.0.0.1:1/test"
    result = run_suite(POSTGRES_TEST, CONTEXTLEDGER_TEST_POSTGRES_URL=url, CONTEXTLEDGER_SKIP_POSTGRES="1")
    assert result.returncode == 0, result.stdout[-3000:]
    assert "1 skipped" in result.stdout and "CONTEXTLEDGER_SKIP_POSTGRES=1" in result.stdout
    # CI never skips them.
    result = run_suite(
        POSTGRES_TEST, CONTEXTLEDGER_TEST_POSTGRES_URL=url, CONTEXTLEDGER_SKIP_POSTGRES="1", CI="true"
    )
    assert result.returncode == 1 and "1 failed" in result.stdout, result.stdout[-3000:]


def test_the_testing_page_documents_what_the_suite_reads() -> None:
    from tests.conftest import POSTGRES_URL

    page = " ".join((REPO / "docs" / "testing.md").read_text(encoding="utf-8").split())
    for name in (
        "CONTEXTLEDGER_TEST_POSTGRES_URL",
        "CONTEXTLEDGER_SKIP_POSTGRES=1",
        "CONTEXTLEDGER_CORPORA",
        "tests/fixtures/corpora",
        "TIKTOKEN_CACHE_DIR",
    ):
        assert f"`{name}`" in page, name
    if "CONTEXTLEDGER_TEST_POSTGRES_URL" not in os.environ:
        assert f"`{POSTGRES_URL}`" in page


#: The tests that read the conversation corpora (and only those: the other tests of
#: these modules read no corpus, and run in the suite itself).
CORPUS_TESTS = (
    "tests/unit/test_estimates.py::test_every_corpus_text_is_within_the_bound_of_any_claude_count_the_published_range_allows",
    "tests/unit/test_estimates.py::test_on_english_prose_the_estimate_is_within_the_bound_of_the_published_characters_rule",
    "tests/unit/test_estimates.py::test_whole_corpus_prompts_are_within_the_bound_of_the_published_range_with_framing",
    "tests/unit/test_shipped_encodings.py::test_corpus_text_encodes_as_tiktoken_encodes_it",
    "tests/properties/test_corpora.py",
)


def test_the_corpus_tests_pass_in_a_clone_with_nothing_beside_it(tmp_path: Path) -> None:
    """A fresh clone has no ``../shared/corpora``: its corpus tests run on the subset
    the repository carries, and pass."""
    import shutil

    clone = tmp_path / "clone"
    shutil.copytree(REPO / "tests", clone / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", clone / "pyproject.toml")
    assert not (tmp_path / "shared").exists()
    environ = {
        k: v
        for k, v in os.environ.items()
        if k not in ("CONTEXTLEDGER_CORPORA", "TIKTOKEN_CACHE_DIR") and not k.startswith("PYTEST_")
    }
    chosen = subprocess.run(
        [sys.executable, "-c", "from tests.conftest import CORPORA; print(CORPORA)"],
        cwd=clone,
        env=environ,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(chosen) == clone / "tests" / "fixtures" / "corpora"
    result = subprocess.run(
        _pytest("-rfs", *CORPUS_TESTS),
        cwd=clone,
        env=environ,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout and "skipped" not in result.stdout


def test_no_page_or_script_tells_readers_to_point_tiktoken_outside_the_checkout() -> None:
    """The encodings ship with the package: no command shown needs a folder beside the
    checkout for them."""
    pages = [REPO / "README.md", REPO / "CONTRIBUTING.md", *(REPO / "docs").glob("*.md")]
    files = [*pages, *(REPO / "benchmarks").glob("*.py")]
    assert len(files) > 10
    told = [f.name for f in files if "shared/tiktoken_cache" in f.read_text(encoding="utf-8")]
    assert told == []


def test_the_fake_server_tests_pass_behind_a_proxy_that_cannot_be_reached() -> None:
    """With HTTP_PROXY/HTTPS_PROXY set to a closed port and NO_PROXY unset (a company
    machine, a CI runner), the SDKs still reach the fake servers on 127.0.0.1: the
    pytest plugin exempts loopback from the proxy."""
    proxy = f"http://127.0.0.1:{_closed_port()}"
    environ = {
        k: v
        for k, v in os.environ.items()
        if k.lower() not in ("no_proxy", "all_proxy") and not k.startswith("PYTEST_")
    }
    environ.update(HTTP_PROXY=proxy, HTTPS_PROXY=proxy, http_proxy=proxy, https_proxy=proxy)
    result = run_forked(
        _pytest_args(
            "-rfsp",
            *(f"tests/integration/test_fake_openai.py::{name}" for name in FAKE_SERVER_TESTS),
            "tests/e2e/test_docs.py",
            "-k",
            "fake or testing.md",
        ),
        environ,
    )
    assert result.returncode == 0, result.stdout[-3000:]
    assert " passed" in result.stdout and "failed" not in result.stdout and "skipped" not in result.stdout
    passed = set(re.findall(r"^PASSED tests/\S+::(\w+)", result.stdout, re.MULTILINE))
    assert set(FAKE_SERVER_TESTS) | {"test_the_example_runs_as_written"} <= passed, result.stdout[-3000:]


#: Through the openai SDK to the fake server: chat completions, responses, and the
#: request as the server recorded it (the examples of docs/testing.md run as well).
FAKE_SERVER_TESTS = (
    "test_a_chat_reply_carries_text_parallel_tool_calls_and_usage",
    "test_a_responses_reply_is_text_output_with_usage",
    "test_every_request_is_recorded_with_body_and_headers",
)


def _closed_port() -> int:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])
