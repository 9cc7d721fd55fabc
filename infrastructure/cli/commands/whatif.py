"""``contextledger whatif --policy FILE``: what a candidate reduction policy would have
sent, replayed from the log in memory, side by side with what was recorded.

Nothing is written to the store. The policy file is a JSON object of
``ReductionPolicy`` fields; a file that is not there exits 2, one that is not JSON or
names an unknown field or an invalid value exits 2 with the reason in one line.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextledger.domain.values.errors import InvalidArgumentError, InvalidPolicyError
from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, add_command, conversation_id, non_negative_int
from contextledger.infrastructure.cli.connect import open_ledger

if TYPE_CHECKING:
    from contextledger.application.auditing.whatif_results import WhatIfReport

__all__ = ["read_json_object", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``whatif``."""
    whatif = add_command(
        subparsers,
        "whatif",
        "replay a candidate reduction policy over the log and compare it with what was sent",
        "Re-derives, from the log and without writing to it, what each conversation's "
        "contexts would have been under the policy in FILE (a JSON object of "
        "ReductionPolicy fields), turn by turn, and reports it beside what was recorded: "
        "tokens sent per turn (sum, p50, p95), prefix-stable turns, cap hits, summarizer "
        "calls and tokens with an estimated cost, and the largest differences. A turn is "
        "an append after which the model is called (not an assistant message, no tool "
        "call left open). Summaries are made right after their threshold; the offline "
        "summarizer (the default) needs no network.",
    )
    whatif.add_argument("--policy", metavar="FILE", required=True, type=Path,
                        help="a JSON object of ReductionPolicy fields")
    whatif.add_argument("--conversations", metavar="CID", nargs="+", type=conversation_id,
                        help="only these conversations (ids or keys; default: all)")
    whatif.add_argument("--summarizer", choices=("offline", "openai"), default="offline",
                        help="who writes the simulated summaries (default: offline, no network)")
    whatif.add_argument("--budget-calls", metavar="N", type=non_negative_int, default=None,
                        help="stop before the summarizer call past N (reports how far it got)")
    whatif.add_argument("--prices", metavar="FILE", type=Path, default=None,
                        help='a JSON price table, {"model": {"input": 0.15, "output": 0.6}} in '
                        "dollars per million tokens (default: a small example table)")
    whatif.add_argument("--top", metavar="N", type=non_negative_int, default=5,
                        help="how many of the largest differences to list (default 5)")
    whatif.set_defaults(handler=run)


def read_json_object(path: Path, what: str) -> dict[str, Any]:
    """The JSON object in ``path``; ``Failure`` (exit 2) if there is no such file,
    ``InvalidPolicyError`` / ``InvalidArgumentError`` if it is not a JSON object."""
    error = InvalidPolicyError if what == "policy" else InvalidArgumentError
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise Failure(f"no {what} file at {path}", code=2) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise Failure(f"cannot read the {what} file {path}: {exc}", code=2) from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise error(
            f"the {what} file {path} is not JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(value, dict):
        raise error(f"the {what} file {path} must hold a JSON object, not {type(value).__name__}")
    return value


def run(args: argparse.Namespace) -> int:
    """``whatif --policy FILE``."""
    policy = read_json_object(args.policy, "policy")
    prices = read_json_object(args.prices, "prices") if args.prices is not None else None
    with open_ledger(args) as ledger:
        report = ledger.simulate(
            policy,
            conversations=args.conversations,
            summarizer=args.summarizer,
            budget_calls=args.budget_calls,
            prices=prices,
        )
    if args.json:
        print(render.dump(report.to_dict()))
        return 0
    show(report, top=args.top, example_prices=prices is None)
    return 0


def _change(before: float, after: float) -> str:
    if before == after:
        return "="
    if before == 0:
        return "new"
    return f"{(after - before) / before:+.1%}"


def show(report: WhatIfReport, *, top: int = 5, example_prices: bool = False) -> None:
    """The report as text: both sides, the largest differences, what was left out."""
    rec, sim = report.recorded, report.simulated
    simulated = report.simulated_conversations
    render.out(
        f"what-if: {len(simulated)} conversation{'s' if len(simulated) != 1 else ''} replayed "
        f"({rec.turns:,} turns) under "
        f"{json.dumps(report.policy.model_dump(mode='json', exclude_defaults=True))}; "
        f"summaries by {report.summarizer_model}"
    )
    rows: list[tuple[str, str, str, str]] = [("", "recorded", "simulated", "change")]

    def row(label: str, a: float, b: float, shown: str = "{:,}") -> None:
        rows.append((label, shown.format(a), shown.format(b), _change(a, b)))

    for label, name in (("tokens sent", "tokens_sent"), ("tokens per turn, p50", "p50_tokens"),
                        ("tokens per turn, p95", "p95_tokens"), ("largest context", "max_tokens")):
        row(label, getattr(rec, name), getattr(sim, name))
    for label, name in (("prefix-stable turns", "prefix_stable_turns"), ("cap hits (turns)", "cap_hits"),
                        ("summaries", "summaries"),
                        ("summarizer calls", "summarizer_calls"),
                        ("summarizer tokens in", "summarizer_input_tokens"),
                        ("summarizer tokens out", "summarizer_output_tokens")):
        row(label, getattr(rec, name), getattr(sim, name))
    row("est. cost of contexts", rec.context_cost, sim.context_cost, "${:,.4f}")
    row("est. cost of summaries", rec.summarizer_cost, sim.summarizer_cost, "${:,.4f}")
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for r in rows:
        render.out(f"  {r[0]:<{widths[0]}}  {r[1]:>{widths[1]}}  {r[2]:>{widths[2]}}  {r[3]:>{widths[3]}}")
    largest = report.largest_differences(top)
    if largest:
        render.out("largest differences in tokens sent (simulated - recorded):")
        for c in largest:
            name = f" ({c.key})" if c.key else ""
            assert c.simulated is not None
            render.out(
                f"  {c.conversation_id}{name}: {c.recorded.tokens_sent:,} -> "
                f"{c.simulated.tokens_sent:,} ({c.difference:+,}) over {c.simulated.turns} turns"
            )
    for c in report.not_simulated:
        render.out(f"not simulated: {c.conversation_id}: {render.one_line(c.reason or '')}")
    if report.stopped:
        render.out(f"incomplete: {report.stopped}")
    unpriced = sorted({*rec.unpriced_models, *sim.unpriced_models})
    if unpriced:
        render.out(f"no price for: {', '.join(unpriced)} (left out of the costs)")
    if example_prices:
        render.out("costs use the example price table (not authoritative): pass --prices FILE")
