"""A process's footprint: what starting costs (``import contextledger``, the command line's
``--version`` and ``--help``), and a full garbage collection after real work.

    .venv/bin/python benchmarks/footprint.py [--runs N] [--startup-runs N] [--before REV]

Writes the section between ``<!-- footprint:begin -->`` and ``<!-- footprint:end -->`` of
docs/benchmarks.md. Each run starts fresh Python processes, interleaved:

- *contextledger*: ``import contextledger``, then a ledger on a SQLite file (policy thread,
  offline summarizer) takes 120 appends and its summaries; the time of the import, the
  objects the collector tracks and one full ``gc.collect()`` afterwards;
- *with the openai SDK*: the same, with ``import openai`` after the package, as every
  process paid before the SDK was loaded on first use (the OpenAI summarizer, an
  ``OpenAISummarizer`` named on the package).

- *start-up*: whole processes, timed from outside (wall clock, and the CPU seconds of the
  child from ``getrusage``): ``python -c pass`` and ``import argparse`` as the floor,
  ``import contextledger``, ``contextledger --version`` and ``contextledger --help``
  (the console script); with ``--before REV`` the same commands once more on that
  revision's tree (``git archive`` into a temporary folder, first on ``PYTHONPATH``),
  interleaved with the current ones.

A full collection walks every tracked object and stops the process's threads while it
does; Python runs one whenever enough long-lived objects have piled up, so its length is
a pause that appends see now and then.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
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
cl.Ledger  # the package's names load on first use: what a process that opens a ledger pays
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


#: The start-up commands: (label, argv after the interpreter or the console script).
STARTUP = [
    ("`python -c pass`", ["-c", "pass"]),
    ("`python -c 'import argparse'`", ["-c", "import argparse"]),
    ("`python -c 'import contextledger'`", ["-c", "import contextledger"]),
    ("`contextledger --version`", ["SCRIPT", "--version"]),
    ("`contextledger --help`", ["SCRIPT", "--help"]),
]


def startup_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall and CPU (user + system) seconds of one whole process."""
    script = str(Path(sys.executable).parent / "contextledger")
    command = [sys.executable, *(script if a == "SCRIPT" else a for a in argv)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def startup(runs: int, before: str | None, tmp: Path) -> dict[tuple[str, str], list[tuple[float, float]]]:
    """Each start-up command ``runs`` times, interleaved (and on ``before``'s tree)."""
    trees = {"this tree": dict(os.environ)}
    if before is not None:
        tree = tmp / "before"
        tree.mkdir()
        archive = subprocess.run(["git", "archive", before], cwd=REPO, capture_output=True, check=True)
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
        trees[before] = {**os.environ, "PYTHONPATH": str(tree / "src")}
    times: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for n in range(runs + 1):
        for name, env in (trees.items() if n % 2 == 0 else reversed(trees.items())):
            for label, argv in STARTUP:
                if name != "this tree" and "contextledger" not in label:
                    continue  # the floor is the interpreter's, whichever tree
                result = startup_run(argv, env)
                if n:  # the first round warms the file cache
                    times.setdefault((name, label), []).append(result)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--startup-runs", type=int, default=15)
    parser.add_argument("--before", metavar="REV", help="also time the start-up of this git revision")
    parser.add_argument("--output", type=Path, default=REPO / "docs" / "benchmarks.md")
    args = parser.parse_args()
    results: dict[bool, list[dict[str, float]]] = {False: [], True: []}
    started = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        for n in range(args.runs):
            for with_sdk in ((False, True) if n % 2 == 0 else (True, False)):
                results[with_sdk].append(child(with_sdk, Path(d), n))
        starts = startup(args.startup_runs, args.before, Path(d))

    def m(with_sdk: bool, key: str) -> float:
        return statistics.median(r[key] for r in results[with_sdk])

    command = ".venv/bin/python benchmarks/footprint.py" + (
        f" --runs {args.runs}" if args.runs != 5 else "") + (
        f" --startup-runs {args.startup_runs}" if args.startup_runs != 15 else "") + (
        f" --before {args.before}" if args.before else "")
    lines = ["## A process's footprint (benchmarks/footprint.py)", "",
             f"Written by `benchmarks/footprint.py` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. Command:", "",
             f"    {command}", "",
             f"- machine: {platform.platform()}, Python {platform.python_version()}, "
             f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end", "",
             "### Start-up", "",
             f"Whole processes, {args.startup_runs} interleaved runs each after one warm-up round, "
             "medians (min-max of the wall clock in brackets). CPU is the child's user + system time: "
             "on this shared machine it moves less than the wall clock. With the load average well above "
             "the cores, a process spends most of its wall time waiting for one; on an idle core, start-up "
             "is CPU-bound (the files are cached) and its wall time close to its CPU time.", "",
             "| command | tree | wall s | CPU s |", "|---|---|---|---|"]
    for (name, label), values in sorted(starts.items(), key=lambda item: (
            [label for label, _ in STARTUP].index(item[0][1]), item[0][0] != "this tree")):
        walls = [w for w, _ in values]
        lines.append(f"| {label} | {name} | {statistics.median(walls):.3f} "
                     f"({min(walls):.3f}-{max(walls):.3f}) | {statistics.median(c for _, c in values):.3f} |")
    lines += ["", "`import contextledger` loads none of SQLAlchemy, eventsourcing, psycopg, tiktoken, "
              "pydantic or the openai SDK, and `--version` and `--help` none of the application layer "
              "(tests/unit/test_import_footprint.py): each name of the package loads its module on first "
              "use, and each command what it uses when it runs.", "",
              "### After real work", "",
             f"Fresh processes, {args.runs} interleaved runs each, medians. Each imports the package, "
             "opens a ledger on a SQLite file with its policy thread, appends 120 messages and waits for "
             "the offline summaries; then one full `gc.collect()` is timed. These times are wall clock, "
             "in the process: read them against the load average above.", "",
             "| process | import + `cl.Ledger` s | objects tracked | full collection ms "
             "| openai SDK loaded |",
             "|---|---|---|---|---|"]
    for with_sdk, label in ((False, "contextledger"), (True, "contextledger + `import openai` (as before)")):
        loaded = "yes" if all(r["sdk_loaded"] for r in results[with_sdk]) else "no"
        lines.append(f"| {label} | {m(with_sdk, 'import'):.2f} | {m(with_sdk, 'objects'):,.0f} | "
                     f"{1e3 * m(with_sdk, 'pause'):.1f} | {loaded} |")
    lines += ["", f"Ratios (contextledger / with the SDK): import "
              f"{m(False, 'import') / m(True, 'import'):.2f}x, full collection "
              f"{m(False, 'pause') / m(True, 'pause'):.2f}x.", "",
              "The openai SDK and the SQL read models load on first use: the OpenAI summarizer, "
              "`OpenAISummarizer` or `SQLReadModels` named on the package, the command line's read models; "
              "`cl.Ledger` loads the application layer, eventsourcing and SQLAlchemy (the store's URLs). "
              "A long-running server can make full collections cheaper still with `gc.freeze()` once its "
              "start-up is done: the objects that exist then are left out of every later collection.", "",
              f"Run time: {time.perf_counter() - started:.0f} s."]
    write_section("footprint", lines, args.output)
    print("\n".join(lines))


if __name__ == "__main__":
    main()
