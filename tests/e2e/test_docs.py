"""Every ```python block of README.md and docs/*.md runs as written: each in a fresh
namespace, in an empty temporary working directory, offline."""

from __future__ import annotations

import ast
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
    ship with the package; the provider pages talk to the fake servers of
    ``contextledger.testing``)."""
    monkeypatch.chdir(tmp_path)
    for key in [
        k
        for k in os.environ
        if k.startswith(("CONTEXTLEDGER_", "OPENAI_", "ANTHROPIC_", "GEMINI_", "GOOGLE_"))
    ]:
        monkeypatch.delenv(key)
    return tmp_path


@pytest.mark.parametrize(("where", "code"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_the_example_runs_as_written(where: str, code: str, clean_environment: Path) -> None:
    namespace: dict[str, object] = {"__name__": "__docs__"}
    exec(compile(code, where, "exec"), namespace)  # the docs are ours to run


def test_the_docs_have_examples_to_run() -> None:
    pages = {where.split(":")[0] for where, _ in BLOCKS}
    assert {
        "docs/quickstart.md",
        "docs/concepts.md",
        "docs/configuration.md",
        "docs/operations.md",
        "docs/providers.md",
    } <= pages


def test_the_configuration_page_names_every_setting_and_its_variable() -> None:
    from contextledger.application import Settings

    page = (REPO / "docs" / "configuration.md").read_text(encoding="utf-8")
    missing = [name for name in Settings.model_fields if f"`{name}`" not in page]
    assert missing == []
    source = (REPO / "application" / "shared" / "settings.py").read_text(encoding="utf-8")
    variables = set(re.findall(r'"((?:CONTEXTLEDGER|OPENAI)_[A-Z_]+)"', source))
    assert variables and [v for v in sorted(variables) if f"`{v}`" not in page] == []


def test_the_errors_page_draws_the_whole_tree() -> None:
    import contextledger.domain.values.errors as errors

    page = (REPO / "docs" / "errors.md").read_text(encoding="utf-8")
    assert [name for name in errors.__all__ if name not in page] == []


def version_reads_apart_from_the_context(code: str) -> list[int]:
    """Lines that read a conversation's current version in a call of its own
    (``ledger.conversation(cid).version``, or ``.version`` of a variable holding
    ``ledger.conversation(cid)``): paired with a ``context()`` read, a summary landing
    between the two calls makes them disagree. ``working_memory()`` returns both."""
    tree = ast.parse(code)

    def current_aggregate(node: ast.AST) -> bool:
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "conversation"
            and not any(k.arg == "version" for k in node.keywords)
        )

    holders = {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and current_aggregate(node.value)
        for target in node.targets
        if isinstance(target, ast.Name)
    }
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and node.attr == "version"
        and (current_aggregate(node.value) or (isinstance(node.value, ast.Name) and node.value.id in holders))
    ]


def test_no_page_reads_the_version_and_the_context_in_two_calls() -> None:
    assert version_reads_apart_from_the_context("v = ledger.conversation(cid).version\n") == [1]
    assert version_reads_apart_from_the_context("c = ledger.conversation(cid)\nv = c.version\n") == [2]
    assert version_reads_apart_from_the_context("v = ledger.working_memory(cid).version\n") == []
    found = [
        f"{where} (+{line - 1})"
        for where, code in BLOCKS
        for line in version_reads_apart_from_the_context(code)
    ]
    assert found == [], "read the context and its version together with working_memory()"
    for page in DOCS:
        text = page.read_text(encoding="utf-8")
        assert not re.search(r"conversation\([^)]*\)\.version", text), page.name
    assert any("working_memory(" in code and "version=" in code for _, code in BLOCKS)


def test_the_default_context_caps_given_are_the_ones_the_library_derives() -> None:
    from contextledger.domain.values.windows import default_context_cap

    page = " ".join((REPO / "docs" / "configuration.md").read_text(encoding="utf-8").split())
    given = {
        model: int(number.replace(",", "")) for number, model in re.findall(r"([\d,]+) for `([\w.-]+)`", page)
    }
    assert {"gpt-4", "gpt-4o-mini"} <= set(given)
    assert given == {model: default_context_cap(model) for model in given}
    stored = [
        (model, int(cap))
        for page_path in DOCS
        for model, cap in re.findall(
            r'"model": "([^"]+)", "policy": \{[^}]*"max_context_tokens": (\d+)',
            page_path.read_text(encoding="utf-8"),
        )
    ]
    assert stored and stored == [(model, default_context_cap(model)) for model, _ in stored]


def test_every_page_gives_the_connect_timeout_the_code_uses() -> None:
    import inspect

    from contextledger.application import Settings
    from contextledger.infrastructure.cli.connect import CLI_CONNECT_TIMEOUT
    from contextledger.infrastructure.readmodels import SQLReadModels
    from contextledger.infrastructure.readmodels.storage import engine_for

    default = Settings.model_fields["connect_timeout"].default
    assert default == 5
    assert inspect.signature(SQLReadModels.for_url).parameters["connect_timeout"].default == default
    assert inspect.signature(engine_for).parameters["connect_timeout"].default == default
    pages = {page.name: " ".join(page.read_text(encoding="utf-8").split()) for page in DOCS}
    assert (
        f"| `connect_timeout` | `CONTEXTLEDGER_CONNECT_TIMEOUT` | `{default:g}` |"
        in pages["configuration.md"]
    )
    assert f"the `connect_timeout` setting, {default:g} seconds by default" in pages["configuration.md"]
    assert f"`connect_timeout`, default {default:g} s" in pages["operations.md"]
    assert (
        f"The command line gives a PostgreSQL server {CLI_CONNECT_TIMEOUT} seconds" in pages["operations.md"]
    )
    said = [
        (name, seconds)
        for name, text in pages.items()
        for seconds in re.findall(r"connect[_ ]timeout[^.|]{0,60}?(?<!plus )\b(\d+) s(?:econds)?\b", text)
    ]
    assert said and all(int(s) in (default, CLI_CONNECT_TIMEOUT) for _, s in said), said
