"""The public namespace: ``import contextledger as cl`` is all a user needs.

Every exported name resolves and is documented in docs/api.md; the docs and the
examples import nothing but ``contextledger`` and ``contextledger.testing``; each
layer still exports its own names; the error tree drawn in the code is the one in
the docs.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

import contextledger as cl

REPO = Path(__file__).resolve().parents[2]
PYTHON_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
# The root namespace, the shipped test doubles, and the framework integrations (each
# behind its extra, named in DESIGN.md section 6).
ALLOWED = ("contextledger", "contextledger.testing", "contextledger.integrations")


def test_every_exported_name_resolves_once() -> None:
    assert len(cl.__all__) == len(set(cl.__all__))
    assert [name for name in cl.__all__ if not hasattr(cl, name)] == []


def test_the_documented_entry_points_are_in_the_flat_namespace() -> None:
    from contextledger import ContextLedgerError, Ledger, ReductionPolicy

    for name in ("open", "start", "append", "context", "transcript", "totals", "summaries", "wait_idle"):
        assert callable(getattr(Ledger, name))
    assert ReductionPolicy(trigger_messages=100, keep_messages=10).keep_messages == 10
    assert issubclass(cl.ConversationNotFoundError, ContextLedgerError)


def test_every_exported_name_is_documented_in_the_api_reference() -> None:
    reference = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    missing = [name for name in cl.__all__ if f"`{name}`" not in reference and name != "__version__"]
    assert missing == []


def test_every_error_class_is_exported_flat() -> None:
    import contextledger.domain.values.errors as errors

    assert sorted(set(errors.__all__) - set(cl.__all__)) == []


def _imports(source: str) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def _documented_sources() -> list[tuple[str, str]]:
    sources: list[tuple[str, str]] = []
    for page in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        text = page.read_text(encoding="utf-8")
        for match in PYTHON_BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            sources.append((f"{page.relative_to(REPO)}:{line}", match.group(1)))
    for example in sorted((REPO / "examples").glob("*.py")) if (REPO / "examples").is_dir() else []:
        sources.append((str(example.relative_to(REPO)), example.read_text(encoding="utf-8")))
    return sources


def test_docs_and_examples_use_only_the_public_namespaces() -> None:
    offending = [
        f"{where}: {name}"
        for where, source in _documented_sources()
        for name in _imports(source)
        if name.split(".")[0] == "contextledger" and not name.startswith(ALLOWED[1:])
        and name != ALLOWED[0]
    ]
    assert offending == []


def test_importing_the_package_imports_no_optional_extra() -> None:
    code = (
        "import sys, contextledger\n"
        "extras = ('starlette', 'jinja2', 'uvicorn', 'fastapi', 'agents', 'langchain_core', 'opentelemetry')\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in extras))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["contextledger.domain", "contextledger.application",
                                    "contextledger.infrastructure"])
def test_each_layer_still_exports_its_names(module: str) -> None:
    mod = importlib.import_module(module)
    exported = mod.__all__
    assert len(exported) == len(set(exported))
    assert [name for name in exported if not hasattr(mod, name)] == []


def test_every_error_descends_from_the_one_root() -> None:
    import contextledger.domain.values.errors as errors

    for name in errors.__all__:
        assert issubclass(getattr(errors, name), errors.ContextLedgerError)


def test_the_error_tree_in_the_docs_is_the_one_in_the_code() -> None:
    import contextledger.domain.values.errors as errors

    assert errors.__doc__ is not None
    drawn = errors.__doc__.split("::\n\n", 1)[1].split("\n\nEvery error", 1)[0]
    drawn = "\n".join(line[4:] for line in drawn.splitlines())
    docs = (REPO / "docs" / "errors.md").read_text()
    assert drawn in docs
    for name in errors.__all__:
        assert name in drawn, f"{name} is missing from the drawn tree"
