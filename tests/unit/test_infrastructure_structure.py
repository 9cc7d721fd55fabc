"""The adapters' modules stay small and import one another as a tree: no module of
``contextledger.infrastructure`` is over 500 lines, and no chain of imports between its
modules (``TYPE_CHECKING`` imports counted) leads back to where it started."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOT = REPO / "infrastructure"
PACKAGE = "contextledger.infrastructure"
MAX_LINES = 500


def _modules(root: Path, package: str) -> dict[str, Path]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join((package, *parts))] = path
    return found


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports (absolute imports, as the code
    base writes them; ``from pkg import module`` names the module)."""
    modules = _modules(root, package)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    if target in modules:
                        deps.add(target)
                    elif node.module in modules:
                        deps.add(node.module)
            elif isinstance(node, ast.Import):
                deps.update(alias.name for alias in node.names if alias.name in modules)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_chain_of_imports_between_the_adapters_modules_is_circular() -> None:
    graph = import_graph(ROOT, PACKAGE)
    assert f"{PACKAGE}.readmodels.view" in graph  # the walk found the package
    assert cycles(graph) == []


@pytest.mark.parametrize("name", sorted(_modules(ROOT, PACKAGE)))
def test_no_module_of_the_adapters_is_over_the_line_limit(name: str) -> None:
    path = _modules(ROOT, PACKAGE)[name]
    assert len(path.read_text(encoding="utf-8").splitlines()) <= MAX_LINES


def test_the_checker_finds_a_circle_through_a_type_checking_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from pkg.b import B\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import c\nB = 1\n"
    )
    (tmp_path / "c.py").write_text("from pkg.a import A\n")
    (tmp_path / "d.py").write_text("from pkg.a import A\n")
    assert cycles(import_graph(tmp_path, "pkg")) == [["pkg.a", "pkg.b", "pkg.c"]]
