"""The ``contextledger`` command line, for operators.

Every subcommand takes ``--database URL`` (default: ``CONTEXTLEDGER_DATABASE_URL``,
else ``sqlite:///contextledger.db``), exits 0 on success, 1 when the check or the
store failed, 2 on a usage error, and says why in one line on stderr.

    contextledger demo                      # a long conversation end to end, with a report
    contextledger context CID [--version V] [--json]
    contextledger transcript CID [--json]
    contextledger replay CID [--json]
    contextledger stats [CID] [--json]
    contextledger export [CID]              # JSON lines
    contextledger verify [CID]
    contextledger rebuild [NAME]
    contextledger worker [--shard I/N] [--once]
    contextledger serve [--host H] [--port P]   # the read-only viewer (the web extra)
"""

from __future__ import annotations

import argparse
import json
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, NoReturn, TextIO
from uuid import UUID

from contextledger.application.ledger import Ledger
from contextledger.application.results import TokenTotals
from contextledger.application.settings import Settings
from contextledger.application.summarization import SummarizationRunner
from contextledger.domain.conversation import Conversation
from contextledger.domain.errors import ContextLedgerError, UsageError
from contextledger.infrastructure.cli import serve
from contextledger.infrastructure.database import Database
from contextledger.infrastructure.demo import (
    DEMO_POLICY,
    DEMO_SYSTEM_PROMPT,
    run_demo,
    write_chart,
)
from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels

__all__ = ["build_parser", "main"]

PROG = "contextledger"
DEMO_DATABASE = "sqlite:///contextledger-demo.db"
DEMO_CHART = "contextledger-demo.html"


class _Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {_one_line(message)} (see --help)\n")


class _Failure(Exception):
    """A command failed for a reason already phrased for the operator."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


# ------------------------------------------------------------------------ parsing


def _conversation_id(value: str) -> UUID:
    try:
        return UUID(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid conversation id {value!r} (expected a UUID such as "
            "3f2b8c1e-0d4a-4e5f-9a6b-7c8d9e0f1a2b)"
        ) from None


def _positive_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{value!r} must be 1 or more")
    return number


def _shard(value: str) -> tuple[int, int]:
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard {value!r} must look like I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"shard {value!r} needs 0 <= I < N")
    return index, count


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``contextledger`` (one subparser per command)."""
    parser = _Parser(
        prog=PROG,
        description="Event-sourced LLM conversation memory: inspect, audit and operate a ledger.",
        epilog="Exit status: 0 success, 1 failure (check failed, store error), 2 usage error.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of unexpected errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, summary: str, description: str, *, database_default: str | None = None,
                ) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=summary, description=description)
        sub.add_argument(
            "--database",
            metavar="URL",
            default=database_default,
            help=(
                "the event store: sqlite:///file.db, postgresql://user@host:5432/db[?schema=s] "
                "or memory:// (default: "
                + (database_default or "$CONTEXTLEDGER_DATABASE_URL, else sqlite:///contextledger.db")
                + ")"
            ),
        )
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help=argparse.SUPPRESS)
        return sub

    demo = command(
        "demo",
        "play a long support conversation end to end and report the savings",
        "Plays a synthesized, deterministic customer-support conversation of several hundred "
        "messages (tool calls included) through the ledger with the summarization policy on "
        "(the offline summarizer, or OpenAI when OPENAI_API_KEY is set), shows a progress bar, "
        "then reports messages, summaries, summarizer calls against the minimum the policy "
        "allows, tokens sent against sending the full history, savings and a verify pass. "
        "Writes a chart (self-contained HTML). The SQLite file is recreated on every run "
        "unless --keep is given.",
        database_default=DEMO_DATABASE,
    )
    demo.add_argument("--keep", action="store_true", help="keep the database's earlier contents")
    demo.add_argument("--messages", type=_positive_int, default=600, metavar="N",
                      help="length of the conversation: at least N messages, in whole "
                      "exchanges (default 600)")
    demo.add_argument("--seed", type=int, default=7, help="seed of the synthesized conversation")
    demo.add_argument("--chart", metavar="PATH",
                      help="where to write the HTML chart (default: next to the SQLite file, "
                      f"named after it, else {DEMO_CHART}; '-' for none)")
    demo.add_argument("--json", action="store_true", help="print the report as JSON")
    demo.set_defaults(handler=_demo)

    context = command(
        "context",
        "print the working memory the model is sent next",
        "Prints the context of conversation CID as the model is sent it: system prompt, "
        "summary, then the unsummarized messages (placeholders and cap applied). With "
        "--version V: the context exactly as it stood at aggregate version V.",
    )
    context.add_argument("cid", metavar="CID", type=_conversation_id, help="conversation id")
    context.add_argument("--version", type=_positive_int, metavar="V", help="an earlier aggregate version")
    context.add_argument("--json", action="store_true", help="print OpenAI-format messages as JSON")
    context.set_defaults(handler=_context)

    transcript = command(
        "transcript",
        "print every message ever appended",
        "Prints every message of conversation CID, oldest first, with its position, version "
        "and token count. Nothing summarized is ever lost from the transcript.",
    )
    transcript.add_argument("cid", metavar="CID", type=_conversation_id, help="conversation id")
    transcript.add_argument("--json", action="store_true", help="print entries as JSON")
    transcript.set_defaults(handler=_transcript)

    replay = command(
        "replay",
        "print the conversation's events one by one",
        "Prints every stored event of conversation CID in order, with its version and "
        "timestamp: messages, thresholds reached, summaries, failures, policy changes, usage.",
    )
    replay.add_argument("cid", metavar="CID", type=_conversation_id, help="conversation id")
    replay.add_argument("--json", action="store_true", help="print events as JSON")
    replay.set_defaults(handler=_replay)

    stats = command(
        "stats",
        "print token accounting for one conversation or all",
        "With CID: the conversation's token totals (what the next prompt costs, what the "
        "full history would cost, summaries and summarizer usage). Without: the totals of "
        "every conversation, from the token_totals read model (brought up to date first).",
    )
    stats.add_argument("cid", metavar="CID", type=_conversation_id, nargs="?", help="conversation id")
    stats.add_argument("--json", action="store_true", help="print as JSON")
    stats.set_defaults(handler=_stats)

    export = command(
        "export",
        "write events as JSON lines to stdout",
        "Writes the stored events of conversation CID (or of the whole log, in log order) to "
        "stdout, one JSON object per line: originator_id, version, timestamp, topic, kind, data.",
    )
    export.add_argument("cid", metavar="CID", type=_conversation_id, nargs="?", help="conversation id")
    export.set_defaults(handler=_export)

    verify = command(
        "verify",
        "recompute digests and check the log (exit 1 on a mismatch)",
        "Recomputes every message's chained digest and every summary's source digest and "
        "checks versions and positions, for conversation CID or all. Exits 1 naming the first "
        "mismatch when any stored event was altered.",
    )
    verify.add_argument("cid", metavar="CID", type=_conversation_id, nargs="?", help="conversation id")
    verify.set_defaults(handler=_verify)

    rebuild = command(
        "rebuild",
        "rebuild read models from the log",
        "Drops and recreates read model NAME (or all of them: "
        + ", ".join(READ_MODEL_NAMES)
        + ") and replays the whole log into it, with a progress bar on stderr. Safe while "
        "writers and workers keep running.",
    )
    rebuild.add_argument("name", metavar="NAME", nargs="?", choices=READ_MODEL_NAMES,
                         help="one read model (default: all)")
    rebuild.set_defaults(handler=_rebuild)

    worker = command(
        "worker",
        "run the summarization policy and the read models",
        "Follows the log: runs the summarization policy (bounded concurrency, retries with "
        "backoff) and keeps the read models up to date, until SIGTERM or SIGINT. For "
        "PostgreSQL deployments, run several with --shard I/N: shard I summarizes the "
        "conversations whose id modulo N is I; shard 0 also runs the read models.",
    )
    worker.add_argument("--shard", type=_shard, metavar="I/N", help="run shard I of N")
    worker.add_argument("--once", action="store_true", help="process until idle, then exit")
    worker.add_argument("--timeout", type=float, default=300.0, metavar="SECONDS",
                        help="with --once: give up (exit 1) if not idle after this long (default 300)")
    worker.set_defaults(handler=_worker)

    serve.register(commands)
    return parser


# --------------------------------------------------------------------------- main


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return _exit_code(exc)
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return 2
    where = f"{PROG} {args.command}"
    try:
        return int(args.handler(args))
    except _Failure as exc:
        _error(where, str(exc))
        return exc.code
    except UsageError as exc:
        _error(where, str(exc))
        return 2
    except ContextLedgerError as exc:
        _error(where, str(exc))
        return 1
    except KeyboardInterrupt:
        _error(where, "interrupted")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if args.debug:
            raise
        _error(where, f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for a traceback)")
        return 1


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def _error(where: str, message: str) -> None:
    print(f"{where}: error: {_one_line(message)}", file=sys.stderr)


def _database(args: argparse.Namespace) -> str:
    url: str | None = args.database
    return url if url is not None else Settings.from_env().database_url


def _open(args: argparse.Namespace, *, must_exist: bool = True) -> Ledger:
    """The ledger at ``--database``, without a policy thread (read and operate only)."""
    url = _database(args)
    if must_exist and url.startswith("sqlite"):
        path = _sqlite_path(url)
        if path is not None and not path.exists():
            raise _Failure(f"no database at {path} (check --database)", code=2)
    return Ledger.open(url, run_policy=False)


def _sqlite_path(url: str) -> Path | None:
    raw = url.split("://", 1)[1]
    raw = raw[1:] if raw.startswith("/") else raw
    return None if not raw or raw == ":memory:" else Path(raw).expanduser()


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, UUID):
        return str(value)
    raise TypeError(f"not JSON serializable: {type(value).__name__}")


def _excerpt(message: dict[str, Any], width: int = 140) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(str(p.get("text", f"[{p.get('type')}]")) for p in content)
    text = _one_line(content or "")
    calls = message.get("tool_calls") or []
    if calls:
        called = ", ".join(f"{c['function']['name']}({c['function']['arguments']})" for c in calls)
        text = f"{text} -> {called}" if text else f"-> {called}"
    if message.get("tool_call_id"):
        text = f"[{message['tool_call_id']}] {text}"
    return text if len(text) <= width else text[: width - 1] + "…"


class ProgressBar:
    """A plain ``\\r`` progress bar on a stream (stderr by default)."""

    def __init__(self, label: str, *, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream or sys.stderr
        self.width = width
        self._last = 0.0
        self._shown = False

    def __call__(self, done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - self._last < 0.05:
            return
        self._last = now
        fraction = 1.0 if total <= 0 else min(1.0, done / total)
        filled = round(fraction * self.width)
        bar = "#" * filled + "-" * (self.width - filled)
        self.stream.write(f"\r{self.label} [{bar}] {done}/{total} {fraction:4.0%}")
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\n")
            self.stream.flush()
            self._shown = False


# ---------------------------------------------------------------------- commands


def _demo(args: argparse.Namespace) -> int:
    url: str = args.database
    settings = Settings.from_env().model_copy(update={"database_url": url, "run_policy": True})
    path = _sqlite_path(url) if url.startswith("sqlite") else None
    if path is not None and not args.keep:
        _remove_demo_files(path)
    bar = ProgressBar("demo")
    began = time.perf_counter()
    with Ledger.open(settings=settings) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
        summarizer = ledger.summarizer
        try:
            result = run_demo(
                ledger, seed=args.seed, messages=args.messages, policy=DEMO_POLICY, progress=bar
            )
        finally:
            bar.close()
        ledger.wait_idle(120)
        cid = result.conversation_id
        read_rows = len(models.transcript.transcript(cid))
        read_summaries = len(models.summaries.summaries(cid))
        read_totals = models.token_totals.totals(cid)
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
            path.with_suffix(".html") if path is not None else Path(DEMO_CHART)
        )
        chart = write_chart(result, target, cap=DEMO_POLICY.max_context_tokens).resolve()
    elapsed = time.perf_counter() - began
    p = DEMO_POLICY
    report: dict[str, Any] = {
        "database": url,
        "conversation_id": str(result.conversation_id),
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
    if args.json:
        print(_dump(report))
    else:
        n, t, k = result.messages, p.trigger_messages, p.keep_messages
        lines = [
            f"contextledger demo: one support conversation of {n} messages "
            f"({result.tool_messages} tool results), {len(result.calls)} model calls",
            f"  database           {url}",
            f"  conversation       {result.conversation_id}",
            f"  summarizer         {summarizer_name}",
            f"  policy             summarize past {t} messages keeping {k}; "
            f"{p.keep_tool_results} tool results in full; cap {p.max_context_tokens:,} tokens",
            f"messages             {n}",
            f"summaries            {result.summaries}",
            f"summarizer calls     {result.summarizer_calls} (minimum the policy allows: "
            f"ceil(({n}-{t})/({t}-{k})) = {result.minimum_summarizer_calls}; "
            f"failures {result.summarizer_failures})",
            f"tokens appended      {result.appended_tokens:,}",
            f"tokens sent          {result.sent_tokens:,} with contextledger vs "
            f"{result.full_history_sent_tokens:,} sending the full history at every call",
            f"savings              {result.savings:.1%}",
            f"summarizer tokens    in {result.summarizer_input_tokens:,}, "
            f"out {result.summarizer_output_tokens:,}",
            f"context now          {result.final_context_tokens:,} tokens",
            f"read models          {read_rows} transcript rows, {read_summaries} summaries "
            f"({'match the log' if read_models_match else 'DO NOT match the log'})",
            "verify               "
            + ("OK" if result.verified else f"FAILED: {result.verify_problem}"),
        ]
        if chart is not None:
            lines.append(f"chart                {chart}")
        lines.append(f"time                 {elapsed:.1f} s")
        print("\n".join(lines))
    if not result.verified:
        raise _Failure(f"verify failed: {result.verify_problem}")
    if not read_models_match:
        raise _Failure("the read models do not match the log")
    return 0


def _remove_demo_files(path: Path) -> None:
    if path.exists() and not _holds_only_demo_data(path):
        raise _Failure(
            f"refusing to recreate {path}: it holds conversations that are not the demo's "
            "(pass --keep, or another --database)",
            code=2,
        )
    views = Database.parse(f"sqlite:///{path}").views_path
    for candidate in (path, views):
        if candidate is None:
            continue
        for suffix in ("", "-wal", "-shm", "-journal"):
            Path(f"{candidate}{suffix}").unlink(missing_ok=True)


def _holds_only_demo_data(path: Path) -> bool:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            if "stored_events" not in tables:
                return not tables
            rows = conn.execute(
                "SELECT state FROM stored_events WHERE topic = ?", (Conversation.Started.TOPIC,)
            ).fetchall()
    except sqlite3.DatabaseError:
        return False
    for (state,) in rows:
        try:
            if json.loads(state).get("system_prompt") != DEMO_SYSTEM_PROMPT:
                return False
        except (ValueError, UnicodeDecodeError, AttributeError):
            return False  # encrypted, compressed or foreign: not ours to delete
    return True


def _context(args: argparse.Namespace) -> int:
    with _open(args) as ledger:
        conversation = ledger.conversation(args.cid, version=args.version)
        messages, tokens = conversation.working_memory()
        context = [m.to_openai() for m in messages]
        if args.json:
            print(_dump(context))
            return 0
        at = f"version {args.version}" if args.version else f"version {conversation.version}"
        print(f"context of {args.cid} at {at}: {len(context)} messages, {tokens:,} tokens")
        for index, message in enumerate(context):
            print(f"[{index:>3}] {message['role']:<9} {_excerpt(message)}")
    return 0


def _transcript(args: argparse.Namespace) -> int:
    with _open(args) as ledger:
        entries = ledger.transcript(args.cid)
        if args.json:
            print(_dump([
                {"position": e.position, "version": e.version, "tokens": e.tokens,
                 "timestamp": e.timestamp, "digest": e.digest,
                 "client_message_id": e.client_message_id, "message": e.message}
                for e in entries
            ]))
            return 0
        for e in entries:
            print(f"#{e.position:<5} v{e.version:<6} {e.tokens:>6} tok  {e.message['role']:<9} "
                  f"{_excerpt(e.message, 110)}")
        print(f"{len(entries)} messages, {sum(e.tokens for e in entries):,} tokens")
    return 0


def _describe(kind: str, data: dict[str, Any]) -> str:
    if kind == "Started":
        return (f"model {data['model']}, system prompt {data['system_tokens']} tokens, "
                f"policy {_dump({k: v for k, v in data['policy'].items() if v is not None})}")
    if kind == "MessageAppended":
        return f"#{data['position']} {data['message']['role']} ({data['tokens']} tok) " + _excerpt(
            data["message"], 90
        )
    if kind == "ThresholdReached":
        return (f"{data['limit']} limit: {data['unsummarized_messages']} messages, "
                f"{data['unsummarized_tokens']} tokens unsummarized; pins "
                f"{data['from_position']}-{data['through_position']}")
    if kind == "SummaryCreated":
        p = data["provenance"]
        return (f"summary of {data['from_position']}-{data['through_position']} (stands for "
                f"{data['covers_from']}-{data['through_position']}), {data['tokens']} tok by "
                f"{p['model']} ({p['prompt_version']})")
    if kind == "SummarizationFailed":
        return (f"attempt {data['attempt']} at {data['from_position']}-{data['through_position']} "
                f"failed: {data['kind']}: {_one_line(data['error'])[:100]}")
    if kind == "PolicyChanged":
        return f"policy version {data['policy_version']}"
    if kind == "UsageRecorded":
        return (f"provider usage: prompt {data['prompt_tokens']} (estimated "
                f"{data['estimated_prompt_tokens']}), completion {data['completion_tokens']}")
    return _dump(data)[:140]


def _replay(args: argparse.Namespace) -> int:
    with _open(args) as ledger:
        events = list(ledger.replay(args.cid))
        if args.json:
            print(_dump([{"version": e.version, "timestamp": e.timestamp, "kind": e.kind,
                          "data": e.data} for e in events]))
            return 0
        for e in events:
            print(f"v{e.version:<6} {e.timestamp.isoformat(timespec='milliseconds')}  "
                  f"{e.kind:<20} {_describe(e.kind, e.data)}")
        print(f"{len(events)} events")
    return 0


def _stats(args: argparse.Namespace) -> int:
    with _open(args) as ledger:
        if args.cid is not None:
            totals = ledger.totals(args.cid)
            record = _totals_dict(totals)
            record = {"conversation_id": str(args.cid), **record}
        else:
            models = SQLReadModels.for_ledger(ledger)
            try:
                models.runner(ledger, close_with_runner=False).catch_up()
                found = models.token_totals.global_totals()
            finally:
                models.close()
            record = {k: v for k, v in vars(found).items() if k != "conversation_id"}
            record["source"] = "token_totals read model"
        if args.json:
            print(_dump(record))
            return 0
        width = max(len(k) for k in record) + 2
        for key, value in record.items():
            shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
            if key == "saved_tokens" and record.get("full_history_tokens"):
                shown = f"{shown} ({value / record['full_history_tokens']:.1%} of the full history)"
            print(f"{key.replace('_', ' '):<{width}}{shown}")
    return 0


def _totals_dict(totals: TokenTotals) -> dict[str, Any]:
    return {k: v for k, v in vars(totals).items() if k != "conversations"}


def _export(args: argparse.Namespace) -> int:
    out = sys.stdout
    with _open(args) as ledger:
        if args.cid is not None:
            for audit in ledger.replay(args.cid):
                record = {
                    "originator_id": str(args.cid),
                    "version": audit.version,
                    "timestamp": audit.timestamp.isoformat(),
                    "topic": getattr(Conversation, audit.kind).TOPIC,
                    "kind": audit.kind,
                    "data": audit.data,
                }
                out.write(_dump(record) + "\n")
            return 0
        recorder = ledger.recorder
        start = 1
        while True:
            batch = recorder.select_notifications(start, 500)
            for notification in batch:
                event = ledger.mapper.to_domain_event(notification)
                out.write(_dump({"notification_id": notification.id, **_export_record(event)}) + "\n")
            if len(batch) < 500:
                break
            start = batch[-1].id + 1
    return 0


def _export_record(event: Any) -> dict[str, Any]:
    return {
        "originator_id": str(event.originator_id),
        "version": event.originator_version,
        "timestamp": event.timestamp.isoformat(),
        "topic": type(event).TOPIC,
        "kind": type(event).__name__,
        "data": event.model_dump(
            mode="json", exclude={"originator_id", "originator_version", "timestamp"}
        ),
    }


def _verify(args: argparse.Namespace) -> int:
    with _open(args) as ledger:
        report = ledger.verify(args.cid)
    for problem in report.problems:
        print(f"MISMATCH conversation {problem.conversation_id} version {problem.version}: "
              f"{problem.problem}")
    if not report.ok:
        first = report.problems[0]
        more = len(report.problems) - 1
        raise _Failure(
            f"verify FAILED: conversation {first.conversation_id} version {first.version}: "
            f"{first.problem}" + (f" (and {more} more)" if more else "")
        )
    print(f"verify OK: {report.conversations} conversations, {report.events} events, "
          f"{report.messages} messages, {report.summaries} summaries")
    return 0


def _rebuild(args: argparse.Namespace) -> int:
    names: Iterable[str] = [args.name] if args.name else READ_MODEL_NAMES
    with _open(args) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        try:
            runner = models.runner(ledger, close_with_runner=False)
            for name in names:
                bar = ProgressBar(f"rebuild {name:<13}")
                began = time.perf_counter()
                try:
                    applied = runner.rebuild(name, progress=bar)
                finally:
                    bar.close()
                print(f"rebuilt {name}: {applied} events applied in "
                      f"{time.perf_counter() - began:.1f} s")
        finally:
            models.close()
    return 0


def _worker(args: argparse.Namespace) -> int:
    stop = threading.Event()
    # Handlers first: a SIGTERM that arrives while starting up still stops cleanly.
    restore = _install_signal_handlers(stop) if not args.once else (lambda: None)
    try:
        ledger = _open(args, must_exist=False)
        try:
            return _serve(ledger, args, stop)
        finally:
            ledger.close()
    finally:
        restore()


def _serve(ledger: Ledger, args: argparse.Namespace, stop: threading.Event) -> int:
    shard: tuple[int, int] | None = args.shard
    policy = SummarizationRunner(ledger, ledger.summarizer, shard=shard)
    ledger.attach(policy)
    with_read_models = shard is None or shard[0] == 0
    if with_read_models:
        models = SQLReadModels.for_ledger(ledger)
        ledger.attach(models.runner(ledger))
    where = f"shard {shard[0]}/{shard[1]}" if shard else "all conversations"
    print(f"{PROG} worker: {where}, read models {'on' if with_read_models else 'off'}, "
          f"summarizer {type(ledger.summarizer).__name__}", file=sys.stderr)
    if args.once:
        if not ledger.wait_idle(args.timeout):
            raise _Failure(f"not idle after {args.timeout:g} s (summaries still due?)")
        top = ledger.recorder.max_notification_id() or 0
        print(f"worker: idle at notification {top}")
        return 0
    while not stop.wait(0.2):
        pass
    print(f"{PROG} worker: stopping", file=sys.stderr)
    return 0


def _install_signal_handlers(stop: threading.Event) -> Callable[[], None]:
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(_signum: int, _frame: Any) -> None:
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


if __name__ == "__main__":
    raise SystemExit(main())
