"""Instructions per Agents SDK turn, counted with callgrind (repeatable on a loaded machine).

    .venv/bin/python benchmarks/turn_instructions.py [--sizes 50,500] [--turns 10,40]

For each history size and each session (``LedgerSession`` on a SQLite file, policy
running, and the SDK's ``SQLiteSession``), the script runs itself under
``valgrind --tool=callgrind`` twice: the same fill (the items of ``benchmarks/sessions.py``)
and warm-up, then ``--turns`` turns (``add_items`` of a user item and an answer,
then ``get_items()``). The difference of the two totals over the difference of the
turns is the count of one turn: start-up, imports and the fill cancel out. Prints one
line per size and session, and the ratio of the two.

The ledger's policy thread reads the log on a timer (every 2 s once idle), and a run
under valgrind lasts minutes, longer on a loaded machine: those reads add to the
count in proportion to the run's wall time (measured: one version counted 3.27M and
3.53M per turn at 50 items, side by side with another run and at load 13). Compare
two versions with runs made side by side.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


async def _child(kind: str, size: int, turns: int) -> None:
    from agents import SQLiteSession
    from sessions import POLICY, block, turn_items

    import contextledger as cl
    from contextledger.integrations.agents import LedgerSession

    work = Path(tempfile.mkdtemp())
    items = [i for n in range(size // 4) for i in block(n)]
    if kind == "ledger":
        ledger = cl.Ledger.open(f"sqlite:///{work / 'l.db'}")
        session: object = LedgerSession("s", ledger, policy=POLICY)
    else:
        ledger = None
        session = SQLiteSession("s", work / "sdk.db")
    await session.add_items(items)  # type: ignore[attr-defined]
    for n in range(5):  # warm-up: caches, compiled statements
        await session.add_items(turn_items(10_000 + n))  # type: ignore[attr-defined]
        await session.get_items()  # type: ignore[attr-defined]
    for n in range(turns):
        await session.add_items(turn_items(n))  # type: ignore[attr-defined]
        await session.get_items()  # type: ignore[attr-defined]
    if ledger is not None:
        ledger.close()


def _count(kind: str, size: int, turns: int) -> int:
    with tempfile.TemporaryDirectory() as out:
        target = Path(out) / "cg.out"
        subprocess.run(
            [
                "valgrind",
                "--tool=callgrind",
                f"--callgrind-out-file={target}",
                sys.executable,
                __file__,
                "--child",
                kind,
                str(size),
                str(turns),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "PYTHONHASHSEED": "0"},
        )
        text = target.read_text(errors="replace")
        totals = re.findall(r"^(?:summary|totals):\s*(\d+)", text, re.M)
        return int(totals[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        asyncio.run(_child(sys.argv[2], int(sys.argv[3]), int(sys.argv[4])))
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--sizes", default="50,500")
    parser.add_argument("--turns", default="10,40")
    parser.add_argument("--kinds", default="ledger,sqlite")
    args = parser.parse_args()
    few, many = (int(t) for t in args.turns.split(","))
    load = os.getloadavg()[0]
    for size in (int(s) for s in args.sizes.split(",")):
        per: dict[str, float] = {}
        for kind in args.kinds.split(","):
            per[kind] = (_count(kind, size, many) - _count(kind, size, few)) / (many - few)
            print(f"{size} items  {kind:7s} {per[kind]:>12,.0f} instructions per turn", flush=True)
        if len(per) == 2:
            print(f"{size} items  ratio ledger/sqlite {per['ledger'] / per['sqlite']:.2f}  (load {load:.1f})")


if __name__ == "__main__":
    main()
