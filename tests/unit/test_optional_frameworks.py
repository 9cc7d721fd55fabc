"""Importing contextledger never imports an agent framework (they are optional extras)."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_package_imports_neither_framework() -> None:
    code = (
        "import sys, contextledger as cl; cl.Ledger; "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "('agents', 'langchain', 'langchain_core', 'langchain_openai', 'langgraph', 'pydantic_ai', "
        "'contextledger.integrations')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    assert "integrations" not in result.stdout


def test_the_openai_sdk_loads_only_when_its_summarizer_is_used(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # A ledger on the offline summarizer never loads the SDK (a large import whose
    # objects every full garbage collection would walk); the name still resolves.
    code = (
        "import sys, contextledger as cl\n"
        f"with cl.Ledger.open('sqlite:///{tmp_path / 'a.db'}', run_policy=True) as ledger:\n"
        "    cid = ledger.start('s', policy=cl.ReductionPolicy(trigger_messages=4, keep_messages=1))\n"
        "    for i in range(6): ledger.append(cid, {'role': 'user', 'content': f'm{i}'})\n"
        "    assert ledger.wait_idle(30)\n"
        "    assert ledger.summaries(cid), 'the offline summarizer made no summary'\n"
        "print('openai' in sys.modules)\n"
        "print(cl.OpenAISummarizer.__name__, 'OpenAISummarizer' in dir(cl), 'openai' in sys.modules)\n"
        "from contextledger import OpenAISummarizer, SQLReadModels\n"
        "print(OpenAISummarizer is cl.OpenAISummarizer, SQLReadModels.__name__)\n"
        "try:\n"
        "    cl.NoSuchName\n"
        "except AttributeError as exc:\n"
        "    print(type(exc).__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.split("\n")[:4] == [
        "False",
        "OpenAISummarizer True True",
        "True SQLReadModels",
        "AttributeError",
    ]
