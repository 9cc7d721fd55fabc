"""Audit commands: ``replay``, ``export`` and ``verify``."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, add_command, conversation_id
from contextledger.infrastructure.cli.connect import open_ledger
from contextledger.infrastructure.cli.render import Progress
from contextledger.infrastructure.cli.signals import interruptible

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger
    from contextledger.application.shared.results import AuditEvent

__all__ = ["describe", "register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``replay``, ``export`` and ``verify``."""
    replay = add_command(
        subparsers,
        "replay",
        "print the conversation's events one by one",
        "Prints every stored event of conversation CID in order, with its version and "
        "timestamp: messages, thresholds reached, summaries, failures, policy changes, usage, "
        "edits and forks. A message later retracted or replaced by an edit and a summary "
        'later invalidated are marked (text: in brackets; --json: a "marks" object), an '
        "edit shows the original next to the new version. With --all instead of CID: every "
        "event of the log in log order, with its notification id and conversation (progress "
        "on stderr; --json: one JSON object per line).",
    )
    replay.add_argument("cid", metavar="CID", type=conversation_id, nargs="?", help="conversation id")
    replay.add_argument("--all", action="store_true", help="every conversation, in log order")
    replay.set_defaults(handler=run_replay)

    export = add_command(
        subparsers,
        "export",
        "write events as JSON lines to stdout",
        "Writes the stored events of conversation CID (or of the whole log, in log order, "
        "with notification_id) to stdout, one JSON object per line: originator_id, version, "
        "timestamp, topic, kind, data. For one conversation, events that a later edit "
        'concerns also carry "marks" (retracted, replaced, invalidated; an edit\'s '
        "original message; a fork's origin). With a cipher key set, the events are stored "
        "encrypted and export writes them decrypted only when given --plaintext.",
    )
    export.add_argument("cid", metavar="CID", type=conversation_id, nargs="?", help="conversation id")
    export.add_argument(
        "--subject",
        metavar="S",
        help="everything held about data subject S, as one JSON document (docs/privacy.md)",
    )
    export.add_argument(
        "--markdown", action="store_true", help="with --subject: a readable Markdown rendering instead"
    )
    export.add_argument(
        "--plaintext",
        action="store_true",
        help="with a cipher key set: write the decrypted events (refused otherwise)",
    )
    export.set_defaults(handler=run_export)

    verify = add_command(
        subparsers,
        "verify",
        "recompute digests and check the log (exit 1 on a mismatch)",
        "Recomputes every message's chained digest and every summary's source digest, "
        "checks versions and positions, reads every stored event and snapshot, compares each "
        "snapshot with the events it stands for and recounts every token count, for "
        "conversation CID or all. Prints every problem (a damaged conversation does not stop "
        "the others) and exits 1 naming the first.",
    )
    verify.add_argument("cid", metavar="CID", type=conversation_id, nargs="?", help="conversation id")
    verify.add_argument(
        "--receipt",
        metavar="FILE",
        help="check an erasure's receipt (what 'erase --json' wrote; '-': stdin) against the store",
    )
    verify.set_defaults(handler=run_verify)


def describe(kind: str, data: dict[str, Any]) -> str:
    """One line about a stored event (content escaped for a terminal)."""
    if kind == "Started":
        return (
            f"model {data['model']}, system prompt {data['system_tokens']} tokens, "
            f"policy {render.dump({k: v for k, v in data['policy'].items() if v is not None})}"
        )
    if kind == "MessageAppended":
        return f"#{data['position']} {data['message']['role']} ({data['tokens']} tok) " + render.excerpt(
            data["message"], 90
        )
    if kind == "ThresholdReached":
        return (
            f"{data['limit']} limit: {data['unsummarized_messages']} messages, "
            f"{data['unsummarized_tokens']} tokens unsummarized; pins "
            f"{data['from_position']}-{data['through_position']}"
        )
    if kind == "SummaryCreated":
        p = data["provenance"]
        return (
            f"summary of {data['from_position']}-{data['through_position']} (stands for "
            f"{data['covers_from']}-{data['through_position']}), {data['tokens']} tok by "
            f"{p['model']} ({p['prompt_version']})"
        )
    if kind == "SummarizationFailed":
        return (
            f"attempt {data['attempt']} at {data['from_position']}-{data['through_position']} "
            f"failed: {data['kind']}: {render.one_line(data['error'])[:100]}"
        )
    if kind == "PolicyChanged":
        return f"policy version {data['policy_version']}"
    if kind == "UsageRecorded":
        return (
            f"provider usage: prompt {data['prompt_tokens']} (estimated "
            f"{data['estimated_prompt_tokens']}), completion {data['completion_tokens']}"
        )
    if kind == "MessagesRetracted":
        reason = f": {render.one_line(data['reason'])[:100]}" if data.get("reason") else ""
        return f"{data['command']} retracted {_positions(data['positions'])} ({data['tokens']} tok){reason}"
    if kind == "MessageEdited":
        return (
            f"#{data['position']} {data['message']['role']} edited, replaces v{data['replaces_version']} "
            f"({data['replaced_tokens']} → {data['tokens']} tok): " + render.excerpt(data["message"], 80)
        )
    if kind == "SystemPromptChanged":
        text = render.one_line(data["system_prompt"] or "")[:90] if data.get("system_prompt") else "(none)"
        return f"system prompt changed ({data['system_tokens']} tok): {render.visible(text)}"
    if kind == "SummaryInvalidated":
        versions = ", ".join(f"v{v}" for v in data["invalidated_versions"]) or "none of its own"
        return (
            f"summaries {versions} invalidated ({data['reason']} at v{data['trigger_version']}); "
            f"{len(data['reopened'])} messages back in the window"
        )
    if kind == "Forked":
        origin = data["origin"]
        return (
            f"forked from {origin['conversation_id']} at version {origin['version']} "
            f"(shares #0-#{origin['through_position']})"
        )
    if kind == "ToolsChanged":
        return f"tools: {len(data['tools'] or ())} definitions, {data['tools_tokens']} tok"
    return render.dump(data)[:140]


def _positions(positions: list[int]) -> str:
    shown = ", ".join(f"#{p}" for p in positions[:12])
    return shown + (f" and {len(positions) - 12} more" if len(positions) > 12 else "")


def _mark_text(mark: dict[str, Any]) -> str:
    parts: list[str] = []
    if "original" in mark:
        parts.append(f"was v{mark['original_version']}: {render.excerpt(mark['original'], 60)}")
    if "superseded_by_version" in mark:
        parts.append(f"replaced by v{mark['superseded_by_version']}")
    if mark.get("retracted"):
        reason = f": {render.one_line(mark['retracted_reason'])}" if mark.get("retracted_reason") else ""
        parts.append(f"retracted at v{mark['retracted_version']}{reason}")
    if mark.get("valid") is False:
        parts.append(f"invalidated at v{mark['invalidated_version']}: {mark['invalidated_reason']}")
    return f"  [{'; '.join(parts)}]" if parts else ""


def _line(event: AuditEvent, mark: dict[str, Any] | None = None) -> str:
    return (
        f"v{event.version:<6} {event.timestamp.isoformat(timespec='milliseconds')}  "
        f"{event.kind:<20} {describe(event.kind, event.data)}{_mark_text(mark or {})}"
    )


def run_replay(args: argparse.Namespace) -> int:
    """``replay CID`` or ``replay --all``."""
    if (args.cid is None) == (not args.all):
        raise Failure("give a conversation id CID or --all (not both)", code=2)
    with open_ledger(args, read_only=True) as ledger:
        if args.cid is not None:
            events = list(ledger.replay(args.cid))
            marks = _marks(ledger, events)
            if args.json:
                print(
                    render.dump(
                        [
                            {
                                "version": e.version,
                                "timestamp": e.timestamp,
                                "kind": e.kind,
                                "data": e.data,
                                **_marks_of(marks, e.version),
                            }
                            for e in events
                        ]
                    )
                )
                return 0
            for e in events:
                render.out(_line(e, marks.get(e.version)))
            render.out(render.counted(len(events), "event"))
            return 0
        count = 0
        # Events printed to a terminal show the progress themselves.
        show = not render.is_terminal(sys.stdout)
        several = len(ledger.shards) > 1
        for index, shard in enumerate(ledger.shards):  # store by store, each in log order
            top = shard.recorder.max_notification_id() or 0
            label = f"replay store {index}" if several else "replay"
            store = {"store": index} if several else {}
            with (
                interruptible() as asked,
                Progress(label, should_stop=asked, unit="event", show=show) as progress,
            ):
                progress(0, top)
                for notification_id, event in shard.audit.export():
                    if args.json:
                        print(render.dump({**store, "notification_id": notification_id, **event.record()}))
                    else:
                        where = f"{index}:" if several else ""
                        render.out(f"{where}{notification_id:<7} {event.conversation_id}  {_line(event)}")
                    count += 1
                    progress(min(notification_id, top), top)
                progress(top, top)
    if not args.json:
        render.out(render.counted(count, "event"))
    return 0


def _marks(ledger: Ledger, events: list[AuditEvent]) -> dict[int, dict[str, Any]]:
    """The marks of one conversation's events (``event_marks``)."""
    from contextledger.application.summaries.history import event_marks

    cid = events[0].conversation_id if events else None
    return {} if cid is None else event_marks(ledger.store, cid)


def _marks_of(marks: dict[int, dict[str, Any]], version: int) -> dict[str, Any]:
    return {"marks": marks[version]} if version in marks else {}


def run_export(args: argparse.Namespace) -> int:
    """``export [CID]``: JSON lines on stdout."""
    out = sys.stdout
    with open_ledger(args, read_only=True) as ledger:
        if ledger.settings.cipher_key is not None and not args.plaintext:
            raise Failure(
                "the store is encrypted at rest: export writes its content in plaintext only "
                "with --plaintext",
                code=2,
            )
        if args.subject is not None:
            if args.cid is not None:
                raise Failure("export takes a conversation or --subject S, not both", code=2)
            found = ledger.export_subject(args.subject)
            out.write(found.to_markdown() if args.markdown else render.dump(found.to_json()) + "\n")
            return 0
        if args.markdown:
            raise Failure("--markdown goes with --subject S", code=2)
        if args.cid is not None:
            events = list(ledger.replay(args.cid))
            marks = _marks(ledger, events)
            for event in events:
                out.write(render.dump({**event.record(), **_marks_of(marks, event.version)}) + "\n")
            return 0
        several = len(ledger.shards) > 1
        for index, shard in enumerate(ledger.shards):  # store by store, each in log order
            store = {"store": index} if several else {}
            for notification_id, event in shard.audit.export():
                out.write(render.dump({**store, "notification_id": notification_id, **event.record()}) + "\n")
    return 0


def run_verify(args: argparse.Namespace) -> int:
    """``verify [CID]``: print every problem (an altered, missing or undecodable event,
    a snapshot unlike its events, a token count unlike its recount), each with its
    conversation and version, and exit 1 naming the first."""
    if args.receipt is not None:
        return _verify_receipt(args)
    from contextledger.infrastructure.cli.catchup import present_read_models

    with open_ledger(args, read_only=True) as ledger, present_read_models(ledger) as models:
        if models is not None:  # the log's end is checked against what they applied
            ledger.audit.heads = models.conversations
        report = ledger.verify(args.cid)
    if args.json:
        print(
            render.dump(
                {
                    "ok": report.ok,
                    "conversations": report.conversations,
                    "events": report.events,
                    "messages": report.messages,
                    "summaries": report.summaries,
                    "problems": [
                        {"conversation_id": p.conversation_id, "version": p.version, "problem": p.problem}
                        for p in report.problems
                    ],
                    "erased": list(report.erased),
                    "erased_checked": list(report.erased_checked),
                    "partly_erased": list(report.partly_erased),
                }
            )
        )
    else:
        for cid in report.erased:
            checked = (
                "its structure and digest chain verified, its content unreadable"
                if cid in report.erased_checked
                else "not verified: erased before erasures recorded its structure"
            )
            render.out(f"ERASED conversation {cid}: its data subject was erased ({checked})")
        for cid in report.partly_erased:
            render.out(f"PARTLY ERASED conversation {cid}: its inherited history was erased with its source")
        for problem in report.problems:
            render.out(
                f"MISMATCH conversation {problem.conversation_id} version {problem.version}: "
                f"{problem.problem}"
            )
    if not report.ok:
        first = report.problems[0]
        more = len(report.problems) - 1
        raise Failure(
            f"verify FAILED: conversation {first.conversation_id} version {first.version}: "
            f"{first.problem}" + (f" (and {more} more)" if more else "")
        )
    if not args.json:
        erased = f", {len(report.erased)} erased" if report.erased else ""
        render.out(
            f"verify OK: {render.counted(report.conversations, 'conversation')}{erased}, "
            f"{render.counted(report.events, 'event')}, {render.counted(report.messages, 'message')}, "
            f"{render.counted(report.summaries, 'summary', 'summaries')}"
        )
    return 0


def _verify_receipt(args: argparse.Namespace) -> int:
    """``verify --receipt FILE``: the erasure is recorded, its keys are gone, nothing of
    its subject is readable; exit 1 naming the first thing that does not hold."""
    import json
    from pathlib import Path

    try:
        text = sys.stdin.read() if args.receipt == "-" else Path(args.receipt).read_text(encoding="utf-8")
        data = json.loads(text)
    except (OSError, ValueError) as exc:
        raise Failure(f"cannot read the receipt {args.receipt}: {exc}", code=2) from exc
    with open_ledger(args, read_only=True) as ledger:
        check = ledger.check_receipt(data)
    receipt = check.receipt
    if args.json:
        print(render.dump({"ok": check.ok, "problems": list(check.problems), "receipt": receipt.to_json()}))
    else:
        for problem in check.problems:
            render.out(f"MISMATCH {problem}")
    if not check.ok:
        more = len(check.problems) - 1
        raise Failure(f"receipt FAILED: {check.problems[0]}" + (f" (and {more} more)" if more else ""))
    if not args.json:
        render.out(
            f"receipt OK: subject {render.visible(receipt.subject)} erased at "
            f"{receipt.erased_at.isoformat()}: "
            f"{receipt.events} records in {len(receipt.ranges)} conversations unreadable, "
            f"{len(receipt.key_ids)} keys destroyed, the erasure record matches its digest"
        )
    return 0
