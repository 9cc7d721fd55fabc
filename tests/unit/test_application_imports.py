"""The application layer's modules import one another without a circle: the ``Ledger``
imports its collaborators, and each of them takes a port (a ``Protocol``) instead of
importing the ledger back. Every import counts, ``if TYPE_CHECKING:`` ones and those
inside functions included."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = "contextledger.application"


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Dotted name -> file, for every module under ``root`` (a package's folder)."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        names[".".join((package, *parts))] = path
    return names


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of ``modules`` it imports (``from package import module``
    names that module; ``from module import name`` names the module)."""
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    inner = f"{node.module}.{alias.name}"
                    if inner in modules:
                        found.add(inner)
                    elif node.module in modules:
                        found.add(node.module)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in modules)
        found.discard(name)
        graph[name] = found
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
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


def test_no_application_module_imports_one_that_imports_it_back() -> None:
    modules = module_names(REPO / "application", PACKAGE)
    assert len(modules) > 30
    assert circles(import_graph(modules)) == []


def test_the_ledger_imports_its_collaborators_and_none_of_them_reaches_it_again() -> None:
    modules = module_names(REPO / "application", PACKAGE)
    graph = import_graph(modules)
    ledger = f"{PACKAGE}.ledger"
    assert {f"{PACKAGE}.commands", f"{PACKAGE}.queries", f"{PACKAGE}.store"} <= graph[ledger]
    reached: set[str] = set()
    todo = list(graph[ledger])
    while todo:
        current = todo.pop()
        if current not in reached:
            reached.add(current)
            todo.extend(graph[current])
    assert ledger not in reached


def test_the_checker_finds_a_circle_through_a_type_checking_import(tmp_path: Path) -> None:
    (tmp_path / "__init__.py").write_text("")
    (tmp_path / "a.py").write_text("from pkg.b import B\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.c import C\n"
    )
    (tmp_path / "c.py").write_text("def f():\n    from pkg import a\n")
    (tmp_path / "d.py").write_text("from pkg.a import A\n")
    graph = import_graph(module_names(tmp_path, "pkg"))
    assert circles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
