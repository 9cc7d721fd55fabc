"""The layers depend inward only: domain <- application <- infrastructure."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

FORBIDDEN = {
    "domain": (
        "contextledger.application",
        "contextledger.infrastructure",
        "sqlalchemy",
        "psycopg",
        "openai",
        "tiktoken",
        "application",
        "infrastructure",
    ),
    "application": (
        "contextledger.infrastructure",
        "sqlalchemy",
        "psycopg",
        "openai",
        "tiktoken",
        "infrastructure",
    ),
    "infrastructure": (),
}


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def offending_imports(layer: str) -> list[str]:
    found = []
    for path in sorted((REPO / layer).rglob("*.py")):
        for name in imported_modules(path):
            for banned in FORBIDDEN[layer]:
                if name == banned or name.startswith(banned + "."):
                    found.append(f"{path.relative_to(REPO)} imports {name}")
    return found


@pytest.mark.parametrize("layer", ["domain", "application"])
def test_a_layer_never_imports_an_outer_layer_or_an_adapter_library(layer: str) -> None:
    assert (REPO / layer / "__init__.py").exists()
    assert offending_imports(layer) == []


def test_code_never_uses_the_bare_layer_names() -> None:
    bare = []
    for layer in ("domain", "application", "infrastructure", "tests"):
        for path in (REPO / layer).rglob("*.py"):
            for name in imported_modules(path):
                if name.split(".")[0] in ("domain", "application", "infrastructure"):
                    bare.append(f"{path.relative_to(REPO)}: {name}")
    assert bare == []


def test_the_checker_itself_catches_an_outward_import(tmp_path: Path) -> None:
    sample = tmp_path / "bad.py"
    sample.write_text("from contextledger.infrastructure.tokens import TiktokenCounter\n")
    assert imported_modules(sample) == ["contextledger.infrastructure.tokens"]
