"""A process's footprint: what ``import contextledger`` costs, and a full garbage collection after.

    TIKTOKEN_CACHE_DIR=../shared/tiktoken_cache .venv/bin/python benchmarks/footprint.py [--runs N]

Writes the section between ``<!-- footprint:begin -->`` and ``<!-- footprint:end -->`` of
docs/benchmarks.md. Each run starts fresh Python processes, interleaved:

- *contextledger*: ``import contextledger``, then a ledger on a SQLite file (policy thread,
  offline summarizer) takes 120 appends and its summaries; the time of the import, the
  objects the collector tracks and one full ``gc.collect()`` afterwards;
- *with the openai SDK*: the same, with ``import openai`` after the package, as every
  process paid before the SDK was loaded on first use (the OpenAI summarizer, an
  ``OpenAISummarizer`` named on the package).

A full collection walks every tracked object and stops the process's threads while it
does; Python runs one whenever enough long-lived objects have piled up, so its length is
a pause that appends see now and then.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from sections import write_section  # benchmarks/sections.py (run as a script)

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import gc, json, sys, time
started = time.perf_counter()
import contextledger as cl
if {with_sdk}:
    import openai
imported = time.perf_counter() - started
with cl.Ledger.open("sqlite:///{path}", run_policy=True) as ledger:
    cid = ledger.start("You are terse.", policy=cl.ReductionPolicy(trigger_messages=40, keep_messages=8))
    for i in range(120):
        ledger.append(cid, {{"role": "user" if i % 2 == 0 else "assistant",
                             "content": f"message {{i}} about the parcel and its delivery window"}})
    ledger.wait_idle(60)
    summaries = len(ledger.summaries(cid))
gc.collect()
objects = len(gc.get_objects())
t = time.perf_counter()
gc.collect()
pause = time.perf_counter() - t
print(json.dumps({{"import": imported, "objects": objects, "pause": pause, "summaries": summaries,
                  "sdk_loaded": "openai" in sys.modules}}))
"""


def child(with_sdk: bool, tmp: Path, n: int) -> dict[str, float]:
    code = CHILD.format(with_sdk=with_sdk, path=tmp / f"f{n}-{int(with_sdk)}.db")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    if not result["summaries"]:
        raise RuntimeError("the ledger made no summary")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        for n in range(args.runs):
            for with_sdk in ((False, True) if n % 2 == 0 else (True, False)):
                results[with_sdk].append(child(with_sdk, Path(d), n))

    def m(with_sdk: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[with_sdk])

    command = "TIKTOKEN_CACHE_DIR=../shared/tiktoken_cache .venv/bin/python benchmarks/footprint.py" + (
        f" --runs {args.runs}" if args.runs != 5 else "")
    lines = ["## A process's footprint (benchmarks/footprint.py)", "",
             f"Written by `benchmarks/footprint.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:", "",
             f"    {command}", "",
             f"- machine: {platform.platform()}, Python {platform.python_version()}", "",
             f"Fresh processes, {args.runs} interleaved runs each, medians. Each imports the package, "
             "opens a ledger on a SQLite file with its policy thread, appends 120 messages and waits for "
             "the offline summaries; then one full `gc.collect()` is timed.", "",
             "| process | import s | objects tracked | full collection ms | openai SDK loaded |",
             "|---|---|---|---|---|"]
    for with_sdk, label in ((False, "contextledger"), (True, "contextledger + `import openai` (as before)")):
        loaded = "yes" if all(r["sdk_loaded"] for r in results[with_sdk]) else "no"
        lines.append(f"| {label} | {m(with_sdk, 'import'):.2f} | {m(with_sdk, 'objects'):,.0f} | "
                     f"{1e3 * m(with_sdk, 'pause'):.1f} | {loaded} |")
    lines += ["", f"Ratios (contextledger / with the SDK): import "
              f"{m(False, 'import') / m(True, 'import'):.2f}x, full collection "
              f"{m(False, 'pause') / m(True, 'pause'):.2f}x.", "",
              "The openai SDK and the SQL read models load on first use: the OpenAI summarizer, "
              "`OpenAISummarizer` or `SQLReadModels` named on the package, the command line's read models. "
              "A long-running server can make full collections cheaper still with `gc.freeze()` once its "
              "start-up is done: the objects that exist then are left out of every later collection.", "",
              f"Run time: {time.perf_counter() - started:.0f} s."]
    write_section("footprint", lines, args.output)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
