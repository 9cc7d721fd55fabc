"""Conversation commands: ``list``, ``context``, ``transcript`` and the recovery
command ``close-tool-calls``."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.catchup import current_read_models
from contextledger.infrastructure.cli.common import add_command, conversation_id, positive_int
from contextledger.infrastructure.cli.connect import open_ledger

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.shared.results import TranscriptEntry
    from contextledger.infrastructure.readmodels import SQLReadModels

__all__ = ["register"]

DEFAULT_CLOSE_MESSAGE = (
    "error: the tool call was interrupted and returned no result; it may or may not have run"
)


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``list``, ``context``, ``transcript`` and ``close-tool-calls``."""
    listing = add_command(
        subparsers,
        "list",
        "list the conversations, newest activity first",
        "Lists every conversation, the most recently active first: id, messages, tokens "
        "(the full history, system prompt included), summaries and last activity; a fork "
        "names its source and version. Reads the conversations and token_totals read "
        "models when they have applied the whole log, else the log itself (list only "
        "reads: it never brings the read models up to date; the worker does).",
    )
    listing.add_argument("--limit", type=positive_int, metavar="N", help="show the N newest only")
    listing.set_defaults(handler=run_list)

    context = add_command(
        subparsers,
        "context",
        "print the working memory the model is sent next",
        "Prints the context of conversation CID as the model is sent it: system prompt, "
        "summary, then the unsummarized messages (placeholders and cap applied). With "
        "--version V: the context exactly as it stood at aggregate version V.",
    )
    context.add_argument("cid", metavar="CID", type=conversation_id, help="conversation id")
    context.add_argument("--version", type=positive_int, metavar="V", help="an earlier aggregate version")
    context.set_defaults(handler=run_context)

    transcript = add_command(
        subparsers,
        "transcript",
        "print every message ever appended",
        "Prints every message of conversation CID, oldest first, with its position, version "
        "and token count. Nothing summarized is ever lost from the transcript, and nothing "
        "edited: a retracted message is marked with its version and reason, an edited one "
        "shows the original next to the new version, a fork's shared history names its "
        "source conversation.",
    )
    transcript.add_argument("cid", metavar="CID", type=conversation_id, help="conversation id")
    transcript.set_defaults(handler=run_transcript)

    close = add_command(
        subparsers,
        "close-tool-calls",
        "answer a conversation's unanswered tool calls with an error (recovery)",
        "Recovery for a conversation left waiting for tool results (the application "
        "stopped between the model's tool call and the results): appends one tool "
        "message per unanswered call of the open tool-call group, saying the call failed, "
        "so the conversation can go on. Does nothing when no call is open.",
    )
    close.add_argument("cid", metavar="CID", type=conversation_id, help="conversation id")
    close.add_argument("--message", metavar="TEXT", default=DEFAULT_CLOSE_MESSAGE,
                       help="the content of each tool message (marked as an error)")
    close.set_defaults(handler=run_close_tool_calls)


def run_list(args: argparse.Namespace) -> int:
    """``list``: conversations, newest activity first."""
    rows: list[dict[str, Any]] = []
    with open_ledger(args, read_only=True) as ledger:
        for shard in ledger.shards:  # each store's read models (or its log)
            with current_read_models(shard, "conversations", "token_totals") as models:
                rows += _rows_from_log(shard) if models is None else _rows(models, args.limit)
    rows.sort(key=lambda r: (r["last_activity"], r["conversation_id"]), reverse=True)
    rows = rows[: args.limit]
    if args.json:
        print(render.dump(rows))
        return 0
    render.out(f"{'conversation':<36}  {'messages':>8}  {'tokens':>10}  {'summaries':>9}  last activity")
    for row in rows:
        fork = (f"  fork of {row['forked_from']} v{row['forked_at_version']}"
                if row["forked_from"] else "")
        render.out(f"{row['conversation_id']:<36}  {row['messages']:>8,}  {row['tokens']:>10,}  "
                   f"{row['summaries']:>9,}  {row['last_activity'][:19].replace('T', ' ')}{fork}")
    render.out(render.counted(len(rows), "conversation"))
    return 0


def _rows(models: SQLReadModels, limit: int) -> list[dict[str, Any]]:
    """The newest ``limit`` conversations of one store, from its read models."""
    rows: list[dict[str, Any]] = []
    records = sorted(
        models.conversations.conversations(),
        key=lambda r: (r.updated_at, str(r.conversation_id)),
        reverse=True,
    )[:limit]
    for record in records:
        totals = models.token_totals.totals(record.conversation_id)
        rows.append({
            "conversation_id": str(record.conversation_id),
            "messages": record.messages,
            "tokens": totals.full_history_tokens if totals is not None else 0,
            "summaries": record.summaries,
            "last_activity": record.updated_at.isoformat(),
            "model": record.model,
            "key": record.key,
            "forked_from": None if record.forked_from is None else str(record.forked_from),
            "forked_at_version": record.forked_at_version,
        })
    return rows


def _rows_from_log(ledger: Ledger) -> list[dict[str, Any]]:
    """Every conversation of one store, from its log (its read models are missing or
    behind, and a command that only reads does not bring them up to date). Erased
    conversations are left out, as the read models leave them out."""
    from contextledger.application.shared.results import TokenTotals
    from contextledger.domain.values.errors import ConversationErasedError

    rows: list[dict[str, Any]] = []
    for cid in ledger.audit.conversation_ids():
        try:
            conversation = ledger.conversation(cid)
        except ConversationErasedError:
            continue
        totals = TokenTotals.of(conversation)
        origin = conversation.state.fork_of
        rows.append({
            "conversation_id": str(cid),
            "messages": totals.messages,
            "tokens": totals.full_history_tokens,
            "summaries": totals.summaries,
            "last_activity": conversation.modified_on.isoformat(),
            "model": conversation.state.model,
            "key": totals.key,
            "forked_from": None if origin is None else str(origin.conversation_id),
            "forked_at_version": None if origin is None else origin.version,
        })
    return rows


def run_context(args: argparse.Namespace) -> int:
    """``context``: the working memory, now or at ``--version``."""
    with open_ledger(args, read_only=True) as ledger:
        memory = ledger.working_memory(args.cid, version=args.version)
    if args.json:
        print(render.dump(memory.messages))
        return 0
    messages = render.counted(len(memory.messages), "message")
    tokens = render.counted(memory.tokens, "token", grouped=True)
    render.out(f"context of {args.cid} at version {memory.version}: {messages}, {tokens}")
    for index, message in enumerate(memory.messages):
        render.out(f"[{index:>3}] {message['role']:<9} {render.excerpt(dict(message))}")
    return 0


def entry_marks(entry: TranscriptEntry, originals: dict[tuple[int, int], TranscriptEntry]) -> list[str]:
    """What an edit, a retraction or a fork did to ``entry``, one phrase each."""
    marks: list[str] = []
    if entry.inherited_from is not None:
        marks.append(f"from {entry.inherited_from}")
    if entry.edited_from_version is not None:
        original = originals.get((entry.position, entry.edited_from_version))
        was = f", original: {render.excerpt(original.message, 60)}" if original is not None else ""
        marks.append(f"edit of v{entry.edited_from_version}{was}")
    if entry.superseded_by_version is not None:
        marks.append(f"replaced by v{entry.superseded_by_version}")
    if entry.retracted:
        reason = f": {render.one_line(entry.retracted_reason)}" if entry.retracted_reason else ""
        marks.append(f"retracted at v{entry.retracted_version}{reason}")
    return marks


def run_transcript(args: argparse.Namespace) -> int:
    """``transcript``: every message, oldest first, with the marks of edits."""
    with open_ledger(args, read_only=True) as ledger:
        entries = ledger.transcript(args.cid)
    originals = {(e.position, e.version): e for e in entries}
    if args.json:
        print(render.dump([
            {"position": e.position, "version": e.version, "tokens": e.tokens,
             "timestamp": e.timestamp, "digest": e.digest,
             "client_message_id": e.client_message_id, "message": e.message,
             "current": e.current, "retracted": e.retracted,
             "retracted_version": e.retracted_version, "retracted_reason": e.retracted_reason,
             "edited_from_version": e.edited_from_version,
             "superseded_by_version": e.superseded_by_version,
             "inherited_from": e.inherited_from}
            for e in entries
        ]))
        return 0
    for e in entries:
        marks = entry_marks(e, originals)
        shown = f"  [{'; '.join(marks)}]" if marks else ""
        render.out(f"#{e.position:<5} v{e.version:<6} {e.tokens:>6} tok  {e.message['role']:<9} "
                   f"{render.excerpt(e.message, 110)}{shown}")
    summary = (
        f"{render.counted(len(entries), 'message')}, "
        f"{render.counted(sum(e.tokens for e in entries), 'token', grouped=True)}"
    )
    retracted = sum(1 for e in entries if e.retracted)
    replaced = sum(1 for e in entries if e.superseded_by_version is not None)
    if retracted or replaced:
        summary += f" ({retracted} retracted, {replaced} replaced by an edit)"
    render.out(summary)
    return 0


def run_close_tool_calls(args: argparse.Namespace) -> int:
    """``close-tool-calls``: answer the open tool calls with an error."""
    with open_ledger(args) as ledger:
        positions = ledger.close_open_tool_calls(args.cid, content=args.message)
        entries = ledger.transcript(args.cid)[-len(positions):] if positions else []
    if args.json:
        print(render.dump({
            "conversation_id": str(args.cid),
            "positions": positions,
            "tool_call_ids": [e.message.get("tool_call_id") for e in entries],
        }))
        return 0
    if not positions:
        render.out(f"{args.cid}: no tool call is waiting for a result; nothing appended")
        return 0
    for e in entries:
        content = render.one_line(e.message["content"])
        render.out(f"#{e.position} tool [{e.message.get('tool_call_id')}] {content}")
    render.out(f"{args.cid}: closed {len(positions)} open tool call(s) at positions "
               f"{', '.join(map(str, positions))}")
    return 0
