"""What a process loads: ``import contextledger`` and the command line's ``--version``
and ``--help`` load none of the large libraries nor the application layer; each name
and each command loads what it uses when it is used. (Module sets, not timings: the
times are measured by benchmarks/footprint.py.)"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

#: Loaded only by what needs them: the store, the ledger, counting, the SDK.
HEAVY = (
    "sqlalchemy",
    "eventsourcing",
    "openai",
    "tiktoken",
    "psycopg",
    "psycopg_pool",
    "pydantic",
    "tqdm",
    "contextledger.application",
    "contextledger.infrastructure.persistence.database",
    "contextledger.infrastructure.readmodels",
)

REPORT = (
    "import json, sys\n"
    "print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') "
    f"for h in {HEAVY!r}))), file=sys.__stderr__)\n"
)


def loaded_after(code: str) -> list[str]:
    """The heavy modules loaded once ``code`` has run in a fresh interpreter."""
    done = subprocess.run(
        [sys.executable, "-c", f"try:\n{_indent(code)}\nfinally:\n{_indent(REPORT)}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    last = done.stderr.strip().splitlines()[-1]
    loaded: list[str] = json.loads(last)
    return loaded


def _indent(code: str) -> str:
    return "\n".join("    " + line for line in code.splitlines())


def test_importing_the_package_loads_no_large_library() -> None:
    assert loaded_after("import contextledger") == []


def test_the_package_namespace_is_complete_and_loads_a_name_on_first_use() -> None:
    loaded = loaded_after(
        "import contextledger as cl\nassert cl.ContextLedgerError.__name__\n"
        "assert sorted(cl.__all__) == sorted(set(cl.__all__))"
    )
    assert loaded == []  # the error tree is pure Python
    loaded = loaded_after("import contextledger as cl\ncl.Ledger")
    assert "eventsourcing" in loaded
    assert "sqlalchemy" not in loaded  # the read models' engine: only with the read models
    assert "contextledger.infrastructure.persistence.database" in loaded  # with the ledger, not inside open()
    assert "openai" not in loaded


@pytest.mark.parametrize(
    "argv", [["--version"], ["--help"], ["demo", "--help"], ["rebuild", "--help"]], ids=" ".join
)
def test_the_command_line_starts_without_the_store_or_the_application_layer(argv: list[str]) -> None:
    code = (
        f"import sys\nsys.argv = ['contextledger', *{argv!r}]\n"
        "from contextledger.infrastructure.cli import main\nrc = main()\nassert rc == 0, rc"
    )
    assert loaded_after(code) == []


def test_each_layer_package_loads_its_names_on_first_use() -> None:
    code = (
        "import contextledger.domain, contextledger.application, contextledger.infrastructure\n"
        "from contextledger.domain import ContextLedgerError"
    )
    assert loaded_after(code) == ["contextledger.application"]  # the package alone, none of its modules
    assert "sqlalchemy" in loaded_after("from contextledger.infrastructure import SQLReadModels")
