"""``contextledger demo``: the synthesized support conversation end to end, with a
report and a chart (the scenario itself is ``contextledger.infrastructure.demo``)."""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, add_command, positive_int
from contextledger.infrastructure.cli.connect import check_postgres, database, settings_for
from contextledger.infrastructure.cli.render import Progress
from contextledger.infrastructure.cli.signals import interruptible

if TYPE_CHECKING:
    from contextledger.infrastructure.demo import DemoResult
    from contextledger.infrastructure.persistence.database import Database

__all__ = ["DEMO_CHART", "DEMO_DATABASE", "register"]

DEMO_DATABASE = "sqlite:///contextledger-demo.db"
DEMO_CHART = "contextledger-demo.html"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``demo``."""
    demo = add_command(
        subparsers,
        "demo",
        "play a long support conversation end to end and report the savings",
        "Plays a synthesized, deterministic customer-support conversation of several hundred "
        "messages (tool calls included) through the ledger with the summarization policy on "
        "(the offline summarizer; OpenAI only with --summarizer openai), shows progress, "
        "then reports messages, summaries, summarizer calls against the minimum the policy "
        "allows, tokens sent against sending the full history, savings and a verify pass. "
        "Writes a chart (self-contained HTML). The SQLite file is recreated on every run "
        "unless --keep is given. Ctrl-C stops between two messages (exit 130).",
        database_default=DEMO_DATABASE,
    )
    demo.add_argument("--keep", action="store_true", help="keep the database's earlier contents")
    demo.add_argument("--messages", type=positive_int, default=600, metavar="N",
                      help="length of the conversation: at least N messages, in whole "
                      "exchanges (default 600)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the synthesized conversation")
    demo.add_argument("--summarizer", choices=("offline", "openai"), default="offline",
                      help="offline (default, no network) or openai (a paid call per summary; "
                      "needs OPENAI_API_KEY)")
    demo.add_argument("--chart", metavar="PATH",
                      help="where to write the HTML chart (default: next to the SQLite file, "
                      f"named after it, else {DEMO_CHART}; '-' for none)")
    demo.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``demo``: play, measure, report."""
    from contextledger.application.facade.ledger import Ledger
    from contextledger.infrastructure.counting.encodings import check_encoding_files
    from contextledger.infrastructure.demo import DEMO_POLICY, DEMO_SUBJECT, run_demo, write_chart
    from contextledger.infrastructure.readmodels import SQLReadModels

    check_encoding_files()  # an unusable encoding stops the demo before it writes anything
    db = database(args, default=DEMO_DATABASE)
    updates: dict[str, Any] = {"run_policy": True}
    if args.summarizer == "offline":
        updates["openai_api_key"] = None
    elif not os.environ.get("OPENAI_API_KEY"):
        raise Failure("--summarizer openai needs OPENAI_API_KEY", code=2)
    settings = settings_for(db, **updates)
    if db.path is not None and not args.keep:
        _remove_demo_files(db.path)
    if db.kind == "postgresql":
        check_postgres(db)
    began = time.perf_counter()
    with Ledger.open(settings=settings) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        summarizer = ledger.summarizer
        erased = any(
            keys is not None and keys.tombstone_of(DEMO_SUBJECT) is not None
            for _, keys in ledger.erasures.stores()
        )
        if erased:
            raise Failure(
                    f"the demo's data subject {DEMO_SUBJECT} was erased in this database: run the "
                    "demo without --keep (it recreates the database), or with another --database",
                    code=2,
                )
        with interruptible() as asked, Progress("demo", should_stop=asked, unit="msg") as progress:
            result = run_demo(
                ledger, seed=args.seed, messages=args.messages, policy=DEMO_POLICY, progress=progress
            )
        ledger.wait_idle(120)
        cid = result.conversation_id
        read_totals = models.token_totals.totals(cid)
        read_rows = len(models.transcript.transcript(cid))
        read_summaries = len(models.summaries.summaries(cid))
        read_models_match = (
            read_rows == result.messages
            and read_summaries == result.summaries
            and read_totals is not None
            and read_totals.appended_tokens == result.appended_tokens
        )
        summarizer_name = f"{type(summarizer).__name__} ({getattr(summarizer, 'model', '?')})"
    chart: Path | None = None
    if args.chart != "-":
        target = Path(args.chart) if args.chart else (
            db.path.with_suffix(".html") if db.path is not None else Path(DEMO_CHART)
        )
        chart = write_chart(result, target, cap=DEMO_POLICY.max_context_tokens).resolve()
    report = _report(db, result, summarizer_name, read_models_match, chart,
                     time.perf_counter() - began)
    if settings.key_store is not None:  # the data keys kept apart (docs/privacy.md)
        from contextledger.application.shared.settings import masked_url

        report["key_store"] = str(masked_url(settings.key_store))
    if args.json:
        print(render.dump(report))
    else:
        render.out(_text(report, result, read_rows, read_summaries))
    if not result.verified:
        raise Failure(f"verify failed: {result.verify_problem}")
    if not read_models_match:
        raise Failure("the read models do not match the log")
    return 0


def _report(db: Database, result: DemoResult, summarizer_name: str, read_models_match: bool,
            chart: Path | None, elapsed: float) -> dict[str, Any]:
    return {
        "database": db.masked,
        "conversation_id": str(result.conversation_id),
        "subject": result.subject,
        "summarizer": summarizer_name,
        "messages": result.messages,
        "tool_messages": result.tool_messages,
        "model_calls": len(result.calls),
        "summaries": result.summaries,
        "summarizer_calls": result.summarizer_calls,
        "summarizer_failures": result.summarizer_failures,
        "minimum_summarizer_calls": result.minimum_summarizer_calls,
        "tokens_appended": result.appended_tokens,
        "tokens_sent": result.sent_tokens,
        "tokens_sent_full_history": result.full_history_sent_tokens,
        "savings": round(result.savings, 4),
        "summarizer_input_tokens": result.summarizer_input_tokens,
        "summarizer_output_tokens": result.summarizer_output_tokens,
        "context_tokens_now": result.final_context_tokens,
        "read_models_match": read_models_match,
        "verify": "OK" if result.verified else "FAILED",
        "chart": str(chart) if chart else None,
        "seconds": round(elapsed, 2),
    }


def _text(report: dict[str, Any], result: DemoResult, read_rows: int, read_summaries: int) -> str:
    from contextledger.infrastructure.demo import DEMO_POLICY

    p = DEMO_POLICY
    n, t, k = result.messages, p.trigger_messages, p.keep_messages
    key_store = f" --key-store {report['key_store']}" if report.get("key_store") else ""
    lines = [
        f"contextledger demo: one support conversation of {n} messages "
        f"({result.tool_messages} tool results), {len(result.calls)} model calls",
        f"  database           {report['database']}",
        f"  conversation       {result.conversation_id}",
        f"  data subject       {result.subject} (erase it: contextledger erase --database "
        f"{report['database']}{key_store} --subject {result.subject} --reason TEXT)",
        f"  summarizer         {report['summarizer']}",
        f"  policy             summarize past {t} messages keeping {k}; "
        f"{p.keep_tool_results} tool results in full; cap {p.max_context_tokens:,} tokens",
        f"messages             {n}",
        f"summaries            {result.summaries}",
        f"summarizer calls     {result.summarizer_calls} (minimum the policy allows: "
        f"floor(({n}-{k})/({t}-{k}+1)) = {result.minimum_summarizer_calls}; "
        f"failures {result.summarizer_failures})",
        f"tokens appended      {result.appended_tokens:,}",
        f"tokens sent          {result.sent_tokens:,} with contextledger vs "
        f"{result.full_history_sent_tokens:,} sending the full history at every call",
        f"savings              {result.savings:.1%}",
        f"summarizer tokens    in {result.summarizer_input_tokens:,}, "
        f"out {result.summarizer_output_tokens:,}",
        f"context now          {result.final_context_tokens:,} tokens",
        f"read models          {read_rows} transcript rows, {read_summaries} summaries "
        f"({'match the log' if report['read_models_match'] else 'DO NOT match the log'})",
        "verify               " + ("OK" if result.verified else f"FAILED: {result.verify_problem}"),
    ]
    if report["chart"] is not None:
        lines.append(f"chart                {report['chart']}")
    lines.append(f"time                 {report['seconds']:.1f} s")
    return "\n".join(lines)


def _remove_demo_files(path: Path) -> None:
    from contextledger.infrastructure.persistence.database import Database

    database = Database.parse(f"sqlite:///{path}")
    if database.exists() and not _holds_only_demo_data(path):  # (a bad path: StoreError)
        raise Failure(
            f"refusing to recreate {path}: it holds conversations that are not the demo's "
            "(pass --keep, or another --database)",
            code=2,
        )
    for candidate in (path, database.views_path):
        if candidate is None:
            continue
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{candidate}{suffix}").unlink(missing_ok=True)


def _holds_only_demo_data(path: Path) -> bool:
    import sqlite3

    from contextledger.domain.conversation import Conversation
    from contextledger.domain.events import Forked
    from contextledger.infrastructure.demo import DEMO_SUBJECT, DEMO_SYSTEM_PROMPT

    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "stored_events" not in tables:
                return not tables
            # The demo never forks: a forked conversation is someone else's work.
            if conn.execute(
                "SELECT 1 FROM stored_events WHERE topic = ? LIMIT 1", (Forked.TOPIC,)
            ).fetchone():
                return False
            rows = conn.execute(
                "SELECT originator_id, state FROM stored_events WHERE topic = ?",
                (Conversation.Started.TOPIC,),
            ).fetchall()
            # The demo's conversations name its data subject (their records are under its key).
            demos = set()
            if "stored_conversation_subjects" in tables:
                demos = {
                    _as_uuid(r[0])
                    for r in conn.execute(
                        "SELECT conversation_id FROM stored_conversation_subjects WHERE subject = ?",
                        (DEMO_SUBJECT,),
                    )
                }
    except sqlite3.DatabaseError:
        return False
    for originator_id, state in rows:
        if _as_uuid(originator_id) in demos:
            continue
        try:
            if json.loads(state).get("system_prompt") != DEMO_SYSTEM_PROMPT:
                return False
        except (ValueError, UnicodeDecodeError, AttributeError):
            return False  # encrypted, compressed or foreign: not ours to delete
    return True


def _as_uuid(value: object) -> str:
    """A stored originator id (a UUID's hex or its text) as the UUID's text."""
    import uuid

    try:
        return str(uuid.UUID(str(value)))
    except ValueError:
        return str(value)
