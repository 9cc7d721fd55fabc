"""Every ```python block of README.md and docs/*.md runs as written: each in a fresh
namespace, in an empty temporary working directory, offline."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)


def python_blocks() -> list[tuple[str, str]]:
    blocks: list[tuple[str, str]] = []
    for page in DOCS:
        if not page.exists():
            continue
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            blocks.append((f"{page.relative_to(REPO)}:{line}", match.group(1)))
    return blocks


BLOCKS = python_blocks()


@pytest.fixture
def clean_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary working directory and nothing that reaches out (the tiktoken encodings
    ship with the package)."""
    monkeypatch.chdir(tmp_path)
    for key in [k for k in os.environ if k.startswith(("CONTEXTLEDGER_", "OPENAI_"))]:
        monkeypatch.delenv(key)
    return tmp_path


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_the_example_runs_as_written(where: str, code: str, clean_environment: Path) -> None:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    exec(compile(code, where, "exec"), namespace)  # the docs are ours to run


def test_the_docs_have_examples_to_run() -> None:
    pages = {where.split(":")[0] for where, _ in BLOCKS}
    assert {"docs/quickstart.md", "docs/concepts.md", "docs/configuration.md",
            "docs/operations.md"} <= pages


def test_the_configuration_page_names_every_setting_and_its_variable() -> None:
    from contextledger.application import Settings

    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [name for name in Settings.model_fields if f"`{name}`" not in page]
    assert missing == []
    source = (REPO / "application" / "settings.py").read_text(encoding="utf-8")
    variables = set(re.findall(r'"((?:CONTEXTLEDGER|OPENAI)_[A-Z_]+)"', source))
    assert variables and [v for v in sorted(variables) if f"`{v}`" not in page] == []


def test_the_errors_page_draws_the_whole_tree() -> None:
    import contextledger.domain.errors as errors

    page = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    assert [name for name in errors.__all__ if name not in page] == []
