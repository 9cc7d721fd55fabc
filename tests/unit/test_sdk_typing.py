"""Code that hands ``ledger.context(cid)`` to the openai SDK type-checks under
``mypy --strict``, against the installed package (the editable install's static .pth
is what lets mypy find it), for the Ledger, the AsyncLedger and the quickstart."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

SNIPPET = '''
from __future__ import annotations

from openai import AsyncOpenAI, OpenAI

import contextledger as cl


def turn(client: OpenAI, ledger: cl.Ledger, key: str) -> str | None:
    cid = ledger.get_or_start(key, system_prompt="Be brief.")
    ledger.append(cid, {"role": "user", "content": "hi"})
    completion = client.chat.completions.create(
        model="gpt-4o-mini", messages=ledger.context(cid), tools=ledger.tools(cid)
    )
    ledger.append(cid, completion.choices[0].message)
    ledger.append(cid, completion)
    return completion.choices[0].message.content


async def aturn(client: AsyncOpenAI, ledger: cl.AsyncLedger, key: str) -> None:
    cid = await ledger.get_or_start(key)
    completion = await client.chat.completions.create(
        model="gpt-4o-mini", messages=await ledger.context(cid)
    )
    await ledger.append(cid, completion)
'''

WRONG = '''
import contextledger as cl

def wrong(ledger: cl.Ledger) -> int:
    return ledger.context("chat-1")
'''


def quickstart_block() -> str:
    page = (REPO / "docs" / "quickstart.md").read_text(encoding="utf-8")
    blocks = [b for b in re.findall(r"^```python[ \t]*\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
              if "choices[0].message" in b]
    assert blocks, "the quickstart shows the SDK round trip"
    return str(blocks[0])


#: mypy's cache, kept between runs (gitignored): the SDKs' and pydantic's types are
#: analysed once, not on every run; what changed is checked again.
MYPY_CACHE = Path(__file__).resolve().parents[2] / ".mypy_cache" / "test_sdk_typing"


@pytest.fixture(scope="module")
def mypy_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One strict mypy run over the three files (mypy on the SDK's types is slow)."""
    where = tmp_path_factory.mktemp("typing")
    files = {"service.py": SNIPPET, "wrong.py": WRONG}
    if importlib.util.find_spec("contextledger.testing") is not None:  # it hosts the fake server
        files["quickstart.py"] = quickstart_block()
    for name, code in files.items():
        (where / name).write_text(code, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(MYPY_CACHE), *files],
        cwd=where, capture_output=True, text=True, timeout=900,
    )
    return result.stdout + result.stderr


def test_sending_the_context_to_the_sdk_type_checks_strictly(mypy_output: str) -> None:
    assert "service.py" not in mypy_output, mypy_output


def test_the_context_is_typed_not_any(mypy_output: str) -> None:
    errors = [line for line in mypy_output.splitlines() if line.startswith("wrong.py")]
    assert len(errors) == 1 and "ChatCompletionUserMessageParam" in errors[0], mypy_output


def test_the_quickstart_sdk_example_type_checks_strictly(mypy_output: str) -> None:
    assert "quickstart.py" not in mypy_output, mypy_output
    assert "Found 1 error in 1 file (checked 3 source files)" in mypy_output
