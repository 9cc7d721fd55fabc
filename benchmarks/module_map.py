"""The module map of docs/architecture.md against the package as it is now.

    .venv/bin/python benchmarks/module_map.py [--write]

Lists the modules whose length in the map is more than 10% off their length now,
the modules missing from the map and those it names that no longer exist; exits 1
when there is any. ``--write`` sets every length in the map to the current one (a
module missing from the map still has to be placed and described by hand).

The map is the ``text`` block under ``## Module map``: a line `` layer/  ...`` opens
a layer, and a line ``   path.py  <lines>  description`` names one of its modules,
its path relative to the layer's folder. In the layers kept in rooms, a line
``   -- room/: ...`` opens a room, and the modules under it are the room's (its path
starts with ``room/``); a module of the layer's own folder comes under no room's line.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "architecture.md"
LAYERS = ("domain", "application", "infrastructure")
TOLERANCE = 0.10

_LAYER = re.compile(rf"^ ({'|'.join(LAYERS)})/\s")
_ROOM = re.compile(r"^   -- (?P<room>\w+)/")
_ENTRY = re.compile(r"^   (?P<path>[\w/]+\.py)(?P<gap>\s+)(?P<lines>\d+)(?P<rest>  .*)$")


def map_block(text: str) -> tuple[int, int]:
    """Where the module map's ``text`` block stands in ``text`` (start, end offsets)."""
    heading = text.index("\n## Module map\n")
    start = text.index("```text\n", heading) + len("```text\n")
    return start, text.index("\n```", start)


def modules_in_map(text: str) -> dict[str, int]:
    """``layer/path.py`` -> the length the map gives it."""
    start, end = map_block(text)
    found: dict[str, int] = {}
    layer = None
    for line in text[start:end].splitlines():
        opened = _LAYER.match(line)
        if opened:
            layer = opened.group(1)
            continue
        entry = _ENTRY.match(line)
        if entry and layer is not None:
            name = f"{layer}/{entry.group('path')}"
            if name in found:
                raise ValueError(f"the module map names {name} twice")
            found[name] = int(entry.group("lines"))
    return found


def misplaced(text: str) -> list[str]:
    """The map's ``layer/path.py`` entries listed under a room they are not in (or,
    in a room's folder, under no room's line or another's)."""
    start, end = map_block(text)
    wrong = []
    layer = room = None
    for line in text[start:end].splitlines():
        opened = _LAYER.match(line)
        if opened:
            layer, room = opened.group(1), None
            continue
        if line.startswith("   -- "):  # a room's line, or a group of no room
            heading = _ROOM.match(line)
            room = heading.group("room") if heading else None
            continue
        entry = _ENTRY.match(line)
        if entry and layer is not None and room is not None:
            path = entry.group("path")
            if not path.startswith(f"{room}/"):
                wrong.append(f"{layer}/{path}")
    return wrong


def package_modules(repo: Path = REPO) -> dict[str, int]:
    """``layer/path.py`` -> its length now, for every module of the three layers."""
    return {
        f"{layer}/{path.relative_to(repo / layer).as_posix()}": len(
            path.read_text(encoding="utf-8").splitlines()
        )
        for layer in LAYERS
        for path in sorted((repo / layer).rglob("*.py"))
    }


def off(mapped: int, actual: int) -> bool:
    """Whether a length in the map is more than ``TOLERANCE`` away from the actual one."""
    return abs(mapped - actual) > TOLERANCE * actual


def rewrite(text: str, actual: dict[str, int]) -> str:
    """``text`` with every length in the map set to ``actual``'s, columns kept."""
    start, end = map_block(text)
    lines = []
    layer = None
    for line in text[start:end].splitlines():
        opened = _LAYER.match(line)
        entry = _ENTRY.match(line)
        if opened:
            layer = opened.group(1)
        elif entry and layer is not None and f"{layer}/{entry.group('path')}" in actual:
            width = len(entry.group("gap")) + len(entry.group("lines"))
            count = str(actual[f"{layer}/{entry.group('path')}"])
            line = f"   {entry.group('path')}{count.rjust(width)}{entry.group('rest')}"
        lines.append(line)
    return text[:start] + "\n".join(lines) + text[end:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="set the map's lengths to the current ones")
    args = parser.parse_args(argv)
    text = DOC.read_text(encoding="utf-8")
    mapped, actual = modules_in_map(text), package_modules()
    missing = sorted(set(actual) - set(mapped))
    gone = sorted(set(mapped) - set(actual))
    drifted = {name: (mapped[name], actual[name]) for name in sorted(mapped.keys() & actual.keys())}
    drifted = {name: pair for name, pair in drifted.items() if off(*pair)}
    wrong = misplaced(text)
    for name in missing:
        print(f"missing from the map: {name} ({actual[name]} lines)")
    for name in wrong:
        print(f"listed under a room it is not in: {name}")
    for name in gone:
        print(f"in the map, no longer in the package: {name}")
    for name, (was, now) in drifted.items():
        print(f"{name}: {was} lines in the map, {now} now")
    if args.write:
        DOC.write_text(rewrite(text, actual), encoding="utf-8")
        print(f"lengths set in {DOC.relative_to(REPO)}")
        drifted = {}
    print(f"{len(mapped)} modules in the map, {len(actual)} in the package")
    return 1 if missing or gone or drifted or wrong else 0


if __name__ == "__main__":
    sys.exit(main())
