"""The command-line samples of docs/operations.md are what the commands print: the
page's script makes the two-conversation store its samples read, and each command
shown runs against it and prints the lines shown (timestamps, rates, durations and
seals, which change from run to run, aside)."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

import pytest

from contextledger.infrastructure.cli import main

REPO = Path(__file__).resolve().parents[2]
PAGE = (REPO / "docs" / "operations.md").read_text(encoding="utf-8")
#: What changes from run to run: times, rates, durations, the seals of Started events.
VARYING = [
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(\+00:00)?"), "<time>"),
    (re.compile(r"[\d,]+ event/s"), "<rate>"),
    (re.compile(r"in \d+\.\d s"), "in <seconds> s"),
    (re.compile(r'"seal": "[0-9a-f]{64}"'), '"seal": "<seal>"'),
    # A link's salt is random, and so are its commitment and every digest after it.
    (re.compile(r'"salt": "[0-9a-f]{32}"'), '"salt": "<salt>"'),
    (re.compile(r'"commitment": "[0-9a-f]{64}"'), '"commitment": "<commitment>"'),
    (re.compile(r'"digest": "[0-9a-f]{64}"'), '"digest": "<digest>"'),
]
#: A progress line (on stderr: its count of lines depends on the machine's speed).
PROGRESS = re.compile(r"\[[#-]{30}\]")


def normal(lines: list[str]) -> list[str]:
    shown = []
    for line in lines:
        if PROGRESS.search(line) or line == "...":
            continue
        for pattern, stand_in in VARYING:
            line = pattern.sub(stand_in, line)
        shown.append(line)
    return sorted(shown)


def samples() -> list[tuple[str, list[str], int]]:
    """``(command, lines printed, exit status)`` of the text blocks after the page's
    script, up to its demo."""
    start = PAGE.index("The outputs below are from that database")
    end = PAGE.index("### The demo", start)
    found: list[tuple[str, list[str], int]] = []
    for block in re.findall(r"^```text\n(.*?)^```", PAGE[start:end], re.MULTILINE | re.DOTALL):
        for chunk in block.split("$ contextledger ")[1:]:
            command, *lines = chunk.rstrip("\n").split("\n")
            status = 0
            if lines and (m := re.fullmatch(r"\[exit (\d+)\]", lines[-1])):
                status, lines = int(m.group(1)), lines[:-1]
            found.append((command, lines, status))
    return found


def test_the_operations_samples_are_what_the_commands_print(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("CONTEXTLEDGER_", "OPENAI_"))]:
        monkeypatch.delenv(key)
    assert main(["init", "--database", "sqlite:///app.db"]) == 0
    start = PAGE.index("The outputs below are from that database")
    [script] = re.findall(r"^```python\n(.*?)^```", PAGE[start:], re.MULTILINE | re.DOTALL)[:1]
    exec(compile(script, "docs/operations.md", "exec"), {"__name__": "__docs__"})
    capsys.readouterr()
    shown = samples()
    assert len(shown) >= 15
    for command, lines, status in shown:
        argv = shlex.split(command.split(" > ")[0])
        assert main(argv) == status, command
        captured = capsys.readouterr()
        printed = (captured.err + ("" if " > " in command else captured.out)).rstrip("\n").split("\n")
        assert normal(printed) == normal(lines), command
