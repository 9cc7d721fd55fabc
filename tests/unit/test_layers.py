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


#: Type-only modules of the openai SDK (TypedDicts, no client code) that the application
#: layer may name under ``if TYPE_CHECKING:``, so that ``context()`` is typed as the
#: SDK's request messages while nothing of the SDK is imported at run time.
TYPE_ONLY_ALLOWED = {"application": ("openai.types",)}


def _type_checking_imports(tree: ast.AST) -> set[int]:
    guarded: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for inner in node.body:
                guarded.update(id(n) for n in ast.walk(inner))
    return guarded


def imported_modules(path: Path, *, type_only_allowed: tuple[str, ...] = ()) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    guarded = _type_checking_imports(tree)
    names: list[str] = []
    for node in ast.walk(tree):
        if id(node) in guarded and isinstance(node, ast.ImportFrom) and node.module and any(
            node.module == allowed or node.module.startswith(allowed + ".") for allowed in type_only_allowed
        ):
            continue
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
    return names


def offending_imports(layer: str) -> list[str]:
    found = []
    for path in sorted((REPO / layer).rglob("*.py")):
        for name in imported_modules(path, type_only_allowed=TYPE_ONLY_ALLOWED.get(layer, ())):
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
    sample.write_text("from contextledger.infrastructure.counting.tokens import TiktokenCounter\n")
    assert imported_modules(sample) == ["contextledger.infrastructure.counting.tokens"]


def test_only_type_modules_of_the_sdk_may_be_named_and_only_for_type_checkers(tmp_path: Path) -> None:
    sample = tmp_path / "typed.py"
    sample.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from openai.types.chat import ChatCompletionMessageParam\n"
        "    from openai import OpenAI\n"
        "from openai.types.chat import ChatCompletion\n"
    )
    allowed = TYPE_ONLY_ALLOWED["application"]
    assert sorted(imported_modules(sample, type_only_allowed=allowed)) == ["openai", "openai.types.chat", "typing"]
