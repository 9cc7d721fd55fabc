"""Shared fixtures: stores by URL (memory, SQLite file, PostgreSQL schema) and the fake
OpenAI server of ``contextledger.testing``."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

# Example counts: "ci" (the default) keeps the suite fast; "nightly" searches wider
# (pytest --hypothesis-profile=nightly).
settings.register_profile("ci", max_examples=60)
settings.register_profile("nightly", max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

# The fake OpenAI server fixture (``fake_openai``) ships with the package; the suite's
# order (longest modules first, so that the xdist workers finish together) is
# tests/support/suite_order.py.
pytest_plugins = ["contextledger.testing.pytest_plugin", "tests.support.suite_order"]

_REPO = Path(__file__).resolve().parent.parent
# The tiktoken encodings ship with the package; TIKTOKEN_CACHE_DIR is optional. A
# relative one is relative to where pytest started; the CLI subprocesses of the tests
# run in other folders, so it is made absolute here, before any of them starts.
if os.environ.get("TIKTOKEN_CACHE_DIR"):
    os.environ["TIKTOKEN_CACHE_DIR"] = str(Path(os.environ["TIKTOKEN_CACHE_DIR"]).expanduser().resolve())


def pytest_sessionstart(session: pytest.Session) -> None:
    """Stop at once, in one line, when token counting cannot work: otherwise nearly
    every test fails the same way. Checked once, by the process that runs the session
    (with xdist the controller, before any worker starts)."""
    if hasattr(session.config, "workerinput"):
        return
    from contextledger.domain.values.errors import ConfigurationError
    from contextledger.infrastructure.counting.encodings import check_encoding_files

    try:
        check_encoding_files()
    except ConfigurationError as exc:
        pytest.exit(f"cannot count tokens, no test can run: {exc}", returncode=3)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The forkserver of the tests' processes ends with the session that started it
    (tests/support/processes.py)."""
    from tests.support.processes import stop_forkserver

    stop_forkserver()


POSTGRES_URL = os.environ.get("CONTEXTLEDGER_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
#: The conversation corpora: the folder CONTEXTLEDGER_CORPORA names (the full corpora,
#: say: CONTEXTLEDGER_CORPORA=../shared/corpora), else the licensed subset the
#: repository carries (tests/fixtures/corpora). The subset is the default wherever the
#: checkout sits, so that the suite runs the same tests, in the same time, in every clone.
CORPORA_SUBSET = _REPO / "tests" / "fixtures" / "corpora"
CORPORA = Path(os.environ.get("CONTEXTLEDGER_CORPORA") or CORPORA_SUBSET)


def _mypy_place(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Where the suite's one mypy run writes its output, and the run's name: the
    workers' common folder under xdist (the run's id keeps a reused --basetemp from
    handing out an earlier run's output), else this session's temporary folder."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.getbasetemp().parent, os.environ.get("PYTEST_XDIST_TESTRUNUID", "run")
    return tmp_path_factory.getbasetemp(), "run"


@pytest.fixture(scope="session", autouse=True)
def _strict_mypy_in_background(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Start the suite's one ``mypy --strict`` run as the session starts, if a test of
    the session reads it: it works beside the tests (tests/support/typecheck.py), and
    those tests run last (tests/support/suite_order.py)."""
    if not any("strict_mypy_output" in getattr(item, "fixturenames", ()) for item in request.session.items):
        return
    from tests.support.typecheck import start_in_background

    folder, run = _mypy_place(tmp_path_factory)
    start_in_background(folder, run, tmp_path_factory.mktemp("mypy"))


@pytest.fixture(scope="session")
def strict_mypy_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The output of the suite's one ``mypy --strict`` run (tests/support/typecheck.py):
    the package and the documented snippets, analysed once per run, started in the
    background as the session starts; this waits for it to end."""
    from tests.support.typecheck import strict_output

    folder, run = _mypy_place(tmp_path_factory)
    return strict_output(folder, run, tmp_path_factory.mktemp("mypy"))


def _postgres_admin() -> object:
    """A connection to the test database. An unreachable server fails the test (a green
    run then always means PostgreSQL was tested), unless CONTEXTLEDGER_SKIP_POSTGRES=1
    asks to skip the PostgreSQL tests (never in CI)."""
    import psycopg

    try:
        return psycopg.connect(POSTGRES_URL.split("?")[0], autocommit=True, connect_timeout=3)
    except psycopg.OperationalError as exc:
        where = re.sub(r"//([^:@/]*):[^@/]*@", r"//\1:***@", POSTGRES_URL)
        if os.environ.get("CONTEXTLEDGER_SKIP_POSTGRES") == "1" and not os.environ.get("CI"):
            pytest.skip(f"PostgreSQL unreachable at {where} (CONTEXTLEDGER_SKIP_POSTGRES=1): {exc}")
        pytest.fail(
            f"PostgreSQL is unreachable at {where}: {exc}. Start it, point "
            "CONTEXTLEDGER_TEST_POSTGRES_URL at a server (default "
            "postgresql://postgres@127.0.0.1:5432/test), or set CONTEXTLEDGER_SKIP_POSTGRES=1 "
            "to skip the PostgreSQL tests (docs/testing.md)",
            pytrace=False,
        )


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A PostgreSQL URL on a fresh, empty schema, dropped afterwards."""
    conn = _postgres_admin()
    schema = f"t_{uuid.uuid4().hex[:12]}"
    conn.execute(f'CREATE SCHEMA "{schema}"')  # type: ignore[attr-defined]
    try:
        yield f"{POSTGRES_URL.split('?')[0]}?schema={schema}"
    finally:
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE')  # type: ignore[attr-defined]
        conn.close()  # type: ignore[attr-defined]


@pytest.fixture
def postgres_key_store_url() -> Iterator[str]:
    """A PostgreSQL URL of a fresh database on the test server, for a key store
    (``Settings.key_store``: another database than the event store's), dropped afterwards."""
    conn = _postgres_admin()
    name = f"keys_{uuid.uuid4().hex[:12]}"
    conn.execute(f'CREATE DATABASE "{name}"')  # type: ignore[attr-defined]
    try:
        yield f"{POSTGRES_URL.split('?')[0].rsplit('/', 1)[0]}/{name}"
    finally:
        conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')  # type: ignore[attr-defined]
        conn.close()  # type: ignore[attr-defined]


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.fixture(params=["sqlite", "postgres"])
def shared_url(request: pytest.FixtureRequest) -> str:
    """Each store that several ledgers (processes) can share, in turn."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """Each store the ledger supports, in turn."""
    if request.param == "memory":
        yield "memory://"
    elif request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'ledger.db'}"
    else:
        yield request.getfixturevalue("postgres_url")
