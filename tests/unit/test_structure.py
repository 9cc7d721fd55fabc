"""The house stays easy to walk: no module over 500 lines, no import circle, rooms in order.

The import graph counts every import of a module of the package: at module level,
inside functions, and under ``if TYPE_CHECKING:`` (a type-only circle is still a
circle for a reader). A package's ``__init__`` counts as a module of its own.

Two directions of the graph are stated besides: the ``Ledger`` imports its
collaborators (each takes a port of it instead of importing it back), and the domain
events never reach the aggregate they are folded into, nor its state.

Each layer keeps its modules in rooms, one sub-package per concept, in a stated order
from the top (``ROOMS``: the façade first, the shared ports and settings last; in the
domain, the values last): a room imports its own modules and those of rooms after it,
never one before it, like the layers themselves. A layer's loose modules (outside
every room) import no room, but for the domain's loose modules that take a place in
its order (``PLACES``: the modules stored logs name by path, which stay where they
were); the layer's ``__init__``, its lazy map of public names, may name any. No folder
of the package holds more than 15 modules.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "src" / "contextledger"
MAX_LINES = 500
MAX_MODULES = 15

#: Each layer's rooms, from the top. A new room takes its place here (and in the
#: layer's docstring); a room imports only itself and the rooms after it.
ROOMS: dict[str, tuple[str, ...]] = {
    "application": (
        "facade",
        "writing",
        "reading",
        "privacy",
        "auditing",
        "summaries",
        "projections",
        "formats",
        "following",
        "storage",
        "shared",
    ),
    "infrastructure": ("cli", "web", "demo", "readmodels", "persistence", "keys", "summarizers", "counting"),
    "domain": ("remainder", "conversation", "commands", "folding", "events", "values"),
}

#: Loose modules of a layer that take a place in its order (the place named in
#: ``ROOMS``, stated in the module named like it): in the domain, those stored logs name
#: by path (the aggregate's snapshot, the events and the records beside them) stay
#: where they were, and ``remainder`` reads a fork's log through the aggregate.
PLACES: dict[str, dict[str, str]] = {
    "domain": {
        "remainder": "remainder",
        "conversation": "conversation",
        "events": "events",
        "client_ids": "events",
        "placement": "events",
        "erasure": "events",
    },
}


def package_modules() -> dict[str, Path]:
    """Every module of the package by dotted name (the layers' links followed)."""
    modules: dict[str, Path] = {}
    for folder, _, files in os.walk(PACKAGE, followlinks=True):
        for file in files:
            if not file.endswith(".py"):
                continue
            path = Path(folder) / file
            parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            modules[name] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that ``name`` imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    package = name if is_package else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name in modules)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, *([node.module] if node.module else [])])
            else:
                target = node.module or ""
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    found.add(f"{target}.{alias.name}")
                elif target in modules:
                    found.add(target)
    found.discard(name)
    return found


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_package_is_found_whole() -> None:
    modules = package_modules()
    for expected in (
        "contextledger",
        "contextledger.domain.events",
        "contextledger.application.facade.ledger",
        "contextledger.infrastructure.keys.mapper",
        "contextledger.infrastructure.readmodels.view",
        "contextledger.application.formats.inbound",
        "contextledger.integrations.langchain",
        "contextledger.testing.fake_openai",
    ):
        assert expected in modules, expected


def package_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def reached_from(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` imports, directly or through others."""
    reached: set[str] = set()
    todo = [start]
    while todo:
        for dependency in graph[todo.pop()] - reached:
            reached.add(dependency)
            todo.append(dependency)
    return reached


def test_no_module_is_over_500_lines() -> None:
    long = {
        name: n
        for name, path in package_modules().items()
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert long == {}, f"modules over {MAX_LINES} lines (split them along concepts): {long}"


def test_no_import_circle_type_only_imports_included() -> None:
    assert circles(package_graph()) == []


def test_the_ledger_imports_its_collaborators_and_none_of_them_reaches_it_again() -> None:
    graph = package_graph()
    ledger = "contextledger.application.facade.ledger"
    application = "contextledger.application"
    collaborators = {
        f"{application}.{name}"
        for name in ("writing.commands", "reading.queries", "storage.store", "writing.ledger_edits")
    }
    assert collaborators <= graph[ledger]
    assert ledger not in reached_from(graph, ledger)


def test_the_events_import_neither_the_aggregate_nor_its_state() -> None:
    graph = package_graph()
    below_events = reached_from(graph, "contextledger.domain.events")
    assert "contextledger.domain.values.errors" in below_events  # the walk goes through imports
    folded_into = {
        "conversation",
        "folding.aggregate",
        "folding.state",
        "folding.fold",
        "commands.editing",
        "commands.summarizing",
    }
    named = {f"contextledger.domain.{name}" for name in folded_into}
    assert named <= set(graph)  # each still names a module
    assert below_events.isdisjoint(named)


def test_the_circle_check_finds_a_circle_and_a_type_only_import(tmp_path: Path) -> None:
    # The check itself can fail: a type-only import back is a circle.
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from contextledger.application.facade.ledger import Ledger\n"
    probe = tmp_path / "probe.py"
    probe.write_text(source, encoding="utf-8")
    modules = {"contextledger.application.facade.ledger": Path("ledger.py"), "probe": probe}
    assert imports_of("probe", probe, modules) == {"contextledger.application.facade.ledger"}


def test_the_walk_counts_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("def f():\n    from pkg import b\n", encoding="utf-8")
    (tmp_path / "c.py").write_text("from .a import f\n", encoding="utf-8")
    modules = {
        "pkg": tmp_path / "__init__.py",
        "pkg.a": tmp_path / "a.py",
        "pkg.b": Path("b.py"),
        "pkg.c": tmp_path / "c.py",
    }
    assert imports_of("pkg.a", modules["pkg.a"], modules) == {"pkg.b"}
    assert imports_of("pkg.c", modules["pkg.c"], modules) == {"pkg.a"}
    assert reached_from({"a": {"b"}, "b": {"c"}, "c": set()}, "a") == {"b", "c"}


def room_of(name: str) -> tuple[str, str | None] | None:
    """``(layer, room)`` of a module of a layer with rooms (room ``None``: a loose module
    of the layer); ``None`` for the layer's ``__init__`` and for every other module."""
    parts = name.split(".")
    if len(parts) < 3 or parts[0] != "contextledger" or parts[1] not in ROOMS:
        return None
    if len(parts) == 3 and parts[2] in PLACES.get(parts[1], {}):
        return parts[1], PLACES[parts[1]][parts[2]]
    if len(parts) == 3 and parts[2] not in ROOMS[parts[1]]:
        return parts[1], None
    return parts[1], parts[2]


def upward_imports(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """Imports from a room of a layer into a room before it, or from a loose module
    into any room."""
    found = []
    for name, imported in graph.items():
        here = room_of(name)
        if here is None:
            continue
        layer, room = here
        for other in imported:
            there = room_of(other)
            if there is None or there[0] != layer or there[1] is None or there[1] == room:
                continue
            if room is None or ROOMS[layer].index(there[1]) < ROOMS[layer].index(room):
                found.append((name, other))
    return sorted(found)


def crowded_folders(root: Path, limit: int) -> dict[str, int]:
    """Folders under ``root`` (links followed) holding more than ``limit`` modules."""
    crowded = {}
    for folder, _, files in os.walk(root, followlinks=True):
        relative = Path(folder).relative_to(root).as_posix()
        count = sum(1 for file in files if file.endswith(".py"))
        if count > limit:
            crowded[relative] = count
    return crowded


def test_every_sub_package_of_a_layer_is_a_room_of_the_stated_order() -> None:
    for layer, rooms in ROOMS.items():
        found = {path.parent.name for path in (PACKAGE / layer).glob("*/__init__.py")}
        loose = set(PLACES.get(layer, {}).values())
        assert found == set(rooms) - loose, f"{layer}: place each room in ROOMS (found {sorted(found)})"
        assert all((PACKAGE / layer / f"{module}.py").is_file() for module in PLACES.get(layer, {}))


def test_a_room_imports_only_its_own_modules_and_the_rooms_after_it() -> None:
    assert upward_imports(package_graph()) == []


def test_the_room_check_finds_an_import_upward_and_one_from_a_loose_module() -> None:
    app = "contextledger.application"
    graph = {
        f"{app}.facade.ledger": {f"{app}.storage.store", f"{app}.facade.opening"},
        f"{app}.storage.store": {f"{app}.writing.commands", "contextledger.domain.values.errors"},
        f"{app}.writing.commands": {f"{app}.storage.store"},
        "contextledger.infrastructure.tracing": {"contextledger.infrastructure.keys.aead"},
        "contextledger.infrastructure": {"contextledger.infrastructure.cli.app"},
    }
    assert upward_imports(graph) == [
        (f"{app}.storage.store", f"{app}.writing.commands"),
        ("contextledger.infrastructure.tracing", "contextledger.infrastructure.keys.aead"),
    ]


def test_the_domain_places_of_loose_modules_are_checked_like_rooms() -> None:
    dom = "contextledger.domain"
    graph = {
        f"{dom}.events": {f"{dom}.values.errors", f"{dom}.folding.state"},
        f"{dom}.folding.state": {f"{dom}.events", f"{dom}.values.policy"},
        f"{dom}.client_ids": {f"{dom}.events"},
        f"{dom}.conversation": {f"{dom}.commands.editing", f"{dom}.remainder"},
        f"{dom}.moved": {f"{dom}.values.errors"},
    }
    assert upward_imports(graph) == [
        (f"{dom}.conversation", f"{dom}.remainder"),
        (f"{dom}.events", f"{dom}.folding.state"),
        (f"{dom}.moved", f"{dom}.values.errors"),
    ]


def test_each_layer_states_its_rooms_order_and_each_room_what_it_may_import() -> None:
    for layer, rooms in ROOMS.items():
        layer_doc = ast.get_docstring(
            ast.parse((PACKAGE / layer / "__init__.py").read_text(encoding="utf-8"))
        )
        assert layer_doc is not None and ", ".join(rooms) in " ".join(layer_doc.split()), layer
        for index, room in enumerate(rooms):
            stated_in = PACKAGE / layer / room / "__init__.py"
            if room in PLACES.get(layer, {}).values():
                stated_in = PACKAGE / layer / f"{room}.py"
            source = stated_in.read_text(encoding="utf-8")
            doc = ast.get_docstring(ast.parse(source))
            assert doc is not None and "May import:" in doc, (
                f"{layer}/{room} says what it holds and may import"
            )
            allowed = doc.split("May import:")[1].split("\n\n")[0]
            named = {word for word in allowed.replace(",", " ").replace(".", " ").split() if word in rooms}
            assert named == set(rooms[index + 1 :]), f"{layer}/{room}: 'May import' names the rooms after it"


def test_no_folder_of_the_package_holds_more_than_15_modules() -> None:
    assert crowded_folders(PACKAGE, MAX_MODULES) == {}


def test_the_folder_count_finds_a_crowded_folder(tmp_path: Path) -> None:
    for index in range(MAX_MODULES + 1):
        (tmp_path / "big").mkdir(exist_ok=True)
        (tmp_path / "big" / f"m{index}.py").write_text("", encoding="utf-8")
    (tmp_path / "big" / "notes.md").write_text("", encoding="utf-8")
    assert crowded_folders(tmp_path, MAX_MODULES) == {"big": MAX_MODULES + 1}
    (tmp_path / "big" / "m0.py").unlink()
    assert crowded_folders(tmp_path, MAX_MODULES) == {}
