"""Each benchmark script owns one section of docs/benchmarks.md and rewrites only it.

A section lies between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``; a script
replaces what is between its own markers, or appends the section when the markers are
not there yet, and leaves the rest of the file as it was.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["DOC", "markers", "write_section"]

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"


def markers(name: str) -> tuple[str, str]:
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def write_section(name: str, lines: list[str], path: Path = DOC) -> None:
    """Replace section ``name`` of ``path`` with ``lines`` (append it if missing)."""
    begin, end = markers(name)
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    block = "\n".join([begin, *lines, end])
    if begin in text and end in text:
        head, rest = text.split(begin, 1)
        text = head + block + rest.split(end, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text, encoding="utf-8")
