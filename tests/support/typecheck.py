"""One ``mypy --strict`` run for the whole suite.

Three test modules type-check something under ``mypy --strict``: the package itself
(tests/unit/test_typing.py), code that hands the context to the openai SDK
(tests/unit/test_sdk_typing.py) and the first example of docs/testing.md
(tests/e2e/test_testing_docs.py). Each of them makes mypy analyse the package and its
dependencies' types (openai, pydantic, the standard library), which is most of the
time on a cold cache. So they share one mypy invocation over all their targets: the
package's layers and the testing package as ``-p`` targets, the snippets as files.
Each test reads the output for its own files.

The run starts in the background as the session starts (``start_in_background``,
from an autouse fixture of tests/conftest.py, when the session has a test that reads
it): mypy is one process apart from the tests, working while they run and wait. Under
pytest-xdist each worker has its own session: the first worker to take the file lock
runs mypy and writes its output next to the workers' temporary folders, holding the
lock until the output is written; a test that reads it (``strict_output``) takes the
lock, so it waits for a run in progress, and reads the output (or runs mypy itself if
no output came, say the worker running it died).
"""

from __future__ import annotations

import fcntl
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[2]

#: mypy's cache, kept between runs (gitignored): what did not change is not analysed
#: again. A fresh clone starts without it.
MYPY_CACHE = REPO / ".mypy_cache" / "suite"

#: The packages whose every module must be strict-clean (found through the install).
PACKAGES = (
    "contextledger.domain",
    "contextledger.application",
    "contextledger.infrastructure",
    "contextledger.testing",
)

#: Hands ``ledger.context(cid)`` to the openai SDK, sync and async: must be clean.
SDK_SNIPPET = """
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
"""

#: Uses the context as an int: must give exactly one error (the context is typed).
WRONG_SNIPPET = """
import contextledger as cl

def wrong(ledger: cl.Ledger) -> int:
    return ledger.context("chat-1")
"""


def python_blocks(page: Path) -> list[str]:
    found: list[str] = re.findall(
        r"^```python[ \t]*\n(.*?)^```[ \t]*$", page.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL
    )
    return found


def quickstart_block() -> str:
    """The SDK round trip of docs/quickstart.md."""
    page = (REPO / "docs" / "quickstart.md").read_text(encoding="utf-8")
    blocks = [
        b
        for b in re.findall(r"^```python[ \t]*\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
        if "choices[0].message" in b
    ]
    assert blocks, "the quickstart shows the SDK round trip"
    return str(blocks[0])


def first_block_of_the_testing_page() -> str:
    """The first example of docs/testing.md."""
    return python_blocks(REPO / "docs" / "testing.md")[0]


def files() -> dict[str, str]:
    """The snippet files of the run, by name."""
    found = {
        "sdk_service.py": SDK_SNIPPET,
        "sdk_wrong.py": WRONG_SNIPPET,
        "testing_page_example.py": first_block_of_the_testing_page(),
    }
    if importlib.util.find_spec("contextledger.testing") is not None:  # it hosts the fake server
        found["sdk_quickstart.py"] = quickstart_block()
    return found


def run_strict_mypy(where: Path) -> str:
    """Write the snippets into ``where`` and run mypy --strict once over them and the
    packages; return its output (stdout and stderr)."""
    snippets = files()
    for name, code in snippets.items():
        (where / name).write_text(code, encoding="utf-8")
    args = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--config-file",
        str(REPO / "pyproject.toml"),
        "--cache-dir",
        str(MYPY_CACHE),
    ]
    for package in PACKAGES:
        args += ["-p", package]
    for name in snippets:  # as modules: mypy takes packages and modules, or files
        args += ["-m", name.removesuffix(".py")]
    result = subprocess.run(args, cwd=where, capture_output=True, text=True, timeout=900)
    return f"exit status {result.returncode}\n{result.stdout}{result.stderr}"


def lines_about(output: str, name: str) -> list[str]:
    """The lines of the output that report on the file ``name`` (errors and notes)."""
    return [line for line in output.splitlines() if line.startswith(f"{name}:")]


def summary(output: str) -> str:
    """mypy's last line ("Success: ..." or "Found N errors ..."): present only when
    mypy finished its run."""
    found = [line for line in output.splitlines() if line.startswith(("Success:", "Found "))]
    assert found, f"mypy did not finish:\n{output}"
    return found[-1]


def lines_outside(output: str, names: list[str]) -> list[str]:
    """The lines reporting on a file that is not one of ``names``: on the packages."""
    return [
        line
        for line in output.splitlines()
        if re.match(r"[^ ]+\.pyi?:\d+: ", line) and not line.startswith(tuple(f"{n}:" for n in names))
    ]


def _write_output(folder: Path, name: str, work: Path) -> str:
    """Run mypy (snippets in ``work``) and write its output to ``folder/name`` whole
    (written aside, then renamed: a reader never sees a part of it)."""
    output = run_strict_mypy(work)
    with tempfile.NamedTemporaryFile("w", dir=folder, delete=False, encoding="utf-8") as part:
        part.write(output)
    os.replace(part.name, folder / name)
    return output


def start_in_background(folder: Path, run: str, work: Path) -> threading.Thread | None:
    """Start the run in a thread of this process unless another process holds (or
    held) it: the lock ``folder/mypy-RUN.lock`` stays taken until the output
    ``folder/mypy-RUN.out`` is written. The thread, or None when nothing was started."""
    lock: IO[str] = open(folder / f"mypy-{run}.lock", "w")  # noqa: SIM115 (closed by the thread)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:  # another worker runs it
        lock.close()
        return None
    if (folder / f"mypy-{run}.out").exists():
        lock.close()
        return None

    def run_and_release() -> None:
        try:
            _write_output(folder, f"mypy-{run}.out", work)
        finally:
            lock.close()  # releases the lock

    thread = threading.Thread(target=run_and_release, name="strict-mypy", daemon=False)
    thread.start()
    return thread


def strict_output(folder: Path, run: str, work: Path) -> str:
    """The run's output: waits for a run in progress (the lock), else runs mypy."""
    with open(folder / f"mypy-{run}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        done = folder / f"mypy-{run}.out"
        if done.exists():
            return done.read_text(encoding="utf-8")
        return _write_output(folder, done.name, work)
