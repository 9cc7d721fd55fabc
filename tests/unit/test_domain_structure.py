"""The domain's modules stay small and import one another one way only: no circle,
type-only imports and imports inside functions counted. The events never import the
aggregate they are folded into; the aggregate hands its fold over."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOMAIN = REPO / "domain"
PACKAGE = "contextledger.domain"


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The domain modules ``path`` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = PACKAGE.split(".")[: len(PACKAGE.split(".")) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            for alias in node.names:
                name = f"{module}.{alias.name}"
                found.add(name if name in modules else module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found & modules


def domain_graph(folder: Path) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports (the package itself left out:
    its ``__init__`` only names what the modules define)."""
    paths = {f"{PACKAGE}.{p.stem}": p for p in folder.glob("*.py") if p.stem != "__init__"}
    modules = set(paths)
    return {name: imports_of(path, modules) - {name} for name, path in paths.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_domain_module_imports_itself_back_through_others() -> None:
    assert circles(domain_graph(DOMAIN)) == []


def test_the_events_import_neither_the_aggregate_nor_its_state() -> None:
    graph = domain_graph(DOMAIN)
    below_events = set()
    todo = [f"{PACKAGE}.events"]
    while todo:
        module = todo.pop()
        for dependency in graph[module] - below_events:
            below_events.add(dependency)
            todo.append(dependency)
    assert below_events.isdisjoint(
        {f"{PACKAGE}.{name}" for name in ("conversation", "aggregate", "state", "fold", "editing")}
    )


@pytest.mark.parametrize("path", sorted(DOMAIN.glob("*.py")), ids=lambda p: p.name)
def test_every_domain_module_stays_under_500_lines(path: Path) -> None:
    assert len(path.read_text(encoding="utf-8").splitlines()) <= 500


def test_the_checker_finds_a_circle_through_a_type_only_import(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("from contextledger.domain.b import B\n")
    (tmp_path / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from contextledger.domain.a import A\n"
    )
    (tmp_path / "c.py").write_text("from contextledger.domain import a\n")
    assert circles(domain_graph(tmp_path)) == [[f"{PACKAGE}.a", f"{PACKAGE}.b"]]


def test_the_events_fold_into_the_aggregate_once_its_module_is_loaded() -> None:
    code = (
        "from datetime import UTC, datetime\n"
        "from uuid import uuid4\n"
        "from contextledger.domain.errors import UsageError\n"
        "from contextledger.domain.events import Started\n"
        "from contextledger.domain.policy import ReductionPolicy\n"
        "import sys\n"
        "event = Started(originator_id=uuid4(), originator_version=1, timestamp=datetime.now(UTC),\n"
        "                system_prompt=None, system_tokens=0, model='m', policy=ReductionPolicy(),\n"
        "                digest='d')\n"
        "assert 'contextledger.domain.conversation' not in sys.modules\n"
        "try:\n"
        "    event.mutate(None)\n"
        "except UsageError as error:\n"
        "    print('refused:', error)\n"
        "from contextledger.domain.conversation import Conversation\n"
        "conversation = event.mutate(None)\n"
        "assert type(conversation) is Conversation and conversation.version == 1, conversation\n"
        "print('folded')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("refused: conversation events are folded by contextledger.domain.conversation")
    assert lines[1:] == ["folded"]
