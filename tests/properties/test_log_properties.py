"""Properties of the log: any valid sequence is stored and read back unchanged."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from contextledger.application import Ledger, ReductionPolicy
from contextledger.testing import openai_context_violations

TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=0, max_size=40)
NAME = st.from_regex(r"[A-Za-z0-9_-]{1,12}", fullmatch=True)


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Valid OpenAI message sequences: text turns, named turns, content parts,
    tool-call groups with 1-3 parallel calls answered in any order."""
    messages: list[dict[str, Any]] = []
    for turn in range(draw(st.integers(1, 14))):
        kind = draw(st.sampled_from(["user", "assistant", "parts", "tools", "system", "named"]))
        if kind == "user":
            messages.append({"role": "user", "content": draw(TEXT)})
        elif kind == "named":
            messages.append({"role": "user", "content": draw(TEXT), "name": draw(NAME)})
        elif kind == "system":
            messages.append({"role": draw(st.sampled_from(["system", "developer"])), "content": draw(TEXT)})
        elif kind == "parts":
            messages.append({"role": "user", "content": [{"type": "text", "text": draw(TEXT)}]})
        elif kind == "assistant":
            messages.append({"role": "assistant", "content": draw(TEXT)})
        else:
            n = draw(st.integers(1, 3))
            ids = [f"call_{turn}_{k}" for k in range(n)]
            messages.append({
                "role": "assistant",
                "content": draw(st.one_of(st.none(), TEXT)),
                "tool_calls": [{"id": i, "type": "function",
                                "function": {"name": draw(NAME), "arguments": json.dumps({"q": draw(TEXT)})}}
                               for i in ids],
            })
            for i in draw(st.permutations(ids)):
                messages.append({"role": "tool", "tool_call_id": i, "content": draw(TEXT)})
    return messages


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(conversations())
def test_any_valid_sequence_is_read_back_identical(messages: list[dict[str, Any]]) -> None:
    assert openai_context_violations(messages) == []
    with Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start("sys", policy=ReductionPolicy())
        positions = [ledger.append(cid, m) for m in messages]
        assert positions == list(range(len(messages)))
        assert [e.message for e in ledger.transcript(cid)] == messages
        assert ledger.context(cid) == [{"role": "system", "content": "sys"}, *messages]


READ = """
import json, sys
from uuid import UUID
from contextledger.application import Ledger
with Ledger.open(sys.argv[1], run_policy=False) as ledger:
    for cid in ledger.conversation_ids():
        print(json.dumps([e.message for e in ledger.transcript(cid)]))
"""


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(conversations())
def test_reopening_a_sqlite_store_in_a_new_process_changes_nothing(
    tmp_path_factory: Any, messages: list[dict[str, Any]]
) -> None:
    path: Path = tmp_path_factory.mktemp("reopen") / "ledger.db"
    url = f"sqlite:///{path}"
    with Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("sys")
        ledger.extend(cid, messages)
    out = subprocess.run([sys.executable, "-c", READ, url], capture_output=True, text=True,
                         check=True, timeout=120)
    assert [json.loads(line) for line in out.stdout.splitlines()] == [messages]
