"""``contextledger.testing`` is opt-in, needs no pytest, exports its names explicitly,
and its contract suites stay abstract until subclassed."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys

import pytest

from contextledger.testing import assert_valid_openai_context, openai_context_violations
from contextledger.testing.contracts import LedgerContract, SummarizerContract, TokenCounterContract


def run(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def test_importing_contextledger_does_not_import_the_testing_package() -> None:
    assert run("import sys, contextledger as cl; print('contextledger.testing' in sys.modules)") == "False"


def test_the_testing_package_does_not_import_pytest() -> None:
    code = "import sys, contextledger.testing as t; t.FakeOpenAIServer; print('pytest' in sys.modules)"
    assert run(code) == "False"


@pytest.mark.parametrize("module", ["contextledger.testing", "contextledger.testing.contracts",
                                    "contextledger.testing.pytest_plugin"])
def test_every_exported_name_exists_once_and_is_documented(module: str) -> None:
    mod = importlib.import_module(module)
    assert len(mod.__all__) == len(set(mod.__all__)) and mod.__doc__
    undocumented = [name for name in mod.__all__
                    if (inspect.isclass(getattr(mod, name)) or inspect.isfunction(getattr(mod, name)))
                    and not inspect.getdoc(getattr(mod, name))]
    assert undocumented == []


@pytest.mark.parametrize("suite", [LedgerContract, SummarizerContract, TokenCounterContract])
def test_the_contract_suites_are_abstract_so_pytest_never_collects_them(suite: type) -> None:
    assert inspect.isabstract(suite)
    with pytest.raises(TypeError):
        suite()


@pytest.mark.parametrize("suite", [LedgerContract, SummarizerContract, TokenCounterContract])
def test_each_suite_tells_a_user_how_to_run_it(suite: type) -> None:
    doc = inspect.getdoc(suite) or ""
    assert "class Test" in doc and f"({suite.__name__}):" in doc


CALL = {"role": "assistant", "content": None, "tool_calls": [
    {"id": "a", "type": "function", "function": {"name": "f", "arguments": "{}"}},
    {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}]}


def test_the_openai_rules_accept_a_complete_tool_call_group() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}, CALL,
                {"role": "tool", "tool_call_id": "b", "content": "2"},
                {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "assistant", "content": "ok"}]
    assert openai_context_violations(messages) == []
    assert_valid_openai_context(messages)


@pytest.mark.parametrize(("messages", "problem"), [
    ([{"role": "tool", "tool_call_id": "a", "content": "1"}], "outside a tool-call group"),
    ([CALL, {"role": "tool", "tool_call_id": "a", "content": "1"}], "never answered"),
    ([CALL, {"role": "tool", "tool_call_id": "a", "content": "1"}, {"role": "user", "content": "u"}],
     "before calls ['b'] were answered"),
    ([CALL, {"role": "tool", "tool_call_id": "z", "content": "1"}], "answers no open call"),
    ([{"role": "user", "content": None}], "without content"),
])
def test_the_openai_rules_name_every_broken_rule(messages: list[dict[str, object]], problem: str) -> None:
    assert any(problem in found for found in openai_context_violations(messages))
    with pytest.raises(AssertionError, match=r"\d|end"):
        assert_valid_openai_context(messages)
