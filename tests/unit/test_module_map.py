"""The module map of docs/architecture.md names every module of the three layers and
none that is gone (benchmarks/module_map.py reads it; it also reports lengths that
drifted more than 10%)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def module_map() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", REPO / "benchmarks" / "module_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_map_names_every_module_of_the_layers_and_no_other() -> None:
    tool = module_map()
    mapped = tool.modules_in_map((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    actual = tool.package_modules()
    assert "application/storage/store.py" in actual and "application/formats/inbound.py" in actual
    assert sorted(set(actual) - set(mapped)) == [], "modules missing from docs/architecture.md's module map"
    assert sorted(set(mapped) - set(actual)) == [], "the module map names modules that no longer exist"


def test_the_map_lists_each_module_under_its_room() -> None:
    tool = module_map()
    text = (REPO / "docs" / "architecture.md").read_text(encoding="utf-8")
    assert "   -- facade/: " in text and "   -- persistence/: " in text
    assert tool.misplaced(text) == []
    moved = text.replace("   -- writing/: ", "   -- reading/: ", 1)
    assert "application/writing/commands.py" in tool.misplaced(moved)


def test_the_map_is_read_by_layer_and_rewritten_in_place() -> None:
    tool = module_map()
    text = (
        "# Architecture\n\n## Module map\n\n```text\n"
        " contextledger (src/contextledger)    the flat namespace\n"
        "   testing/                           fakes\n\n"
        " domain/                              pure\n"
        "   events.py                     380  the events\n"
        "   -- a group\n"
        " application/                         use cases\n"
        "   formats/inbound.py             40  decode\n"
        "   events.py                       9  a module of the same name elsewhere\n"
        "```\n\n```text\n   other.py  5  not the map\n```\n"
    )
    assert tool.modules_in_map(text) == {
        "domain/events.py": 380,
        "application/formats/inbound.py": 40,
        "application/events.py": 9,
    }
    rewritten = tool.rewrite(text, {"domain/events.py": 1204, "application/formats/inbound.py": 7})
    assert "   events.py                    1204  the events\n" in rewritten
    assert "   formats/inbound.py              7  decode\n" in rewritten
    assert tool.modules_in_map(rewritten)["application/events.py"] == 9
    assert rewritten.endswith("```\n\n```text\n   other.py  5  not the map\n```\n")
    assert tool.off(450, 500) is False and tool.off(449, 500) is True and tool.off(551, 500) is True
