"""``contextledger erase``: erase a data subject's conversations, or the idle ones.

``--subject S`` or ``--conversation CID`` with ``--reason TEXT`` erases one data
subject (``Ledger.erase``); ``--idle-days N`` erases, as the worker's retention
does, every subject whose conversations are all idle for N days. ``--dry-run`` lists
what would go and erases nothing. ``--export-journal FILE`` and ``--reapply
FILE_OR_URL`` keep erasures across a restore (``erasure_journal``). A store with a
master key needs it (``CONTEXTLEDGER_CIPHER_KEY``): see docs/privacy.md.
"""

from __future__ import annotations

import argparse
import dataclasses
from datetime import datetime
from typing import TYPE_CHECKING, Any
from uuid import UUID

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, add_command, conversation_id, positive_int
from contextledger.infrastructure.cli.connect import open_ledger

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``erase``."""
    erase = add_command(
        subparsers,
        "erase",
        "erase a data subject's conversations (crypto-shredding), or the idle ones",
        "Destroys the data key of a data subject: every event, snapshot and read-model value "
        "of its conversations (sealed under that key, in copies and dead rows too) becomes "
        "unreadable for good, and the log records who, when "
        "and why (docs/privacy.md). --subject S erases subject S; --conversation CID the "
        "subject of CID when CID is its only conversation (or its own subject); "
        "--idle-days N every subject whose conversations all had no event for N days (the "
        "worker's retention, reason 'retention: idle N days'). --dry-run lists what would "
        "go and erases nothing. A store with a master key needs it ($CONTEXTLEDGER_CIPHER_KEY): "
        "another key is refused before anything changes. A subject no conversation names "
        "(a typo) is refused unless --force, which erases the name anyway to pre-empt the "
        "subject: no conversation can be started under it afterwards.",
    )
    which = erase.add_mutually_exclusive_group(required=True)
    which.add_argument("--subject", metavar="S", help="the data subject to erase")
    which.add_argument(
        "--conversation",
        metavar="CID",
        type=conversation_id,
        help="the conversation (id or key) whose subject to erase",
    )
    which.add_argument(
        "--idle-days",
        metavar="N",
        type=positive_int,
        dest="idle_days",
        help="erase every subject whose conversations are all idle for N days",
    )
    which.add_argument(
        "--export-journal",
        metavar="FILE",
        dest="export_journal",
        help="write every erasure recorded in the store to FILE (- for stdout), to re-apply after a restore",
    )
    which.add_argument(
        "--reapply",
        metavar="FILE_OR_URL",
        help="erase again the subjects of an erasure journal, or of another store's log (after a restore)",
    )
    erase.add_argument(
        "--reason",
        metavar="TEXT",
        help="why (recorded with the erasure; required with --subject and --conversation)",
    )
    erase.add_argument(
        "--force",
        action="store_true",
        help="erase --subject S even though no conversation names S (pre-empts the subject)",
    )
    erase.add_argument(
        "--dry-run", action="store_true", dest="dry_run", help="list what would be erased, erase nothing"
    )
    erase.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """``erase``."""
    if args.export_journal is not None or args.reapply is not None:
        from contextledger.infrastructure.cli.commands.erasure_journal import run_journal

        return run_journal(args)
    if args.idle_days is not None and args.reason is not None:
        raise Failure(
            "--idle-days records its own reason ('retention: idle N days'): give no --reason", code=2
        )
    if args.idle_days is None and not args.dry_run and (args.reason is None or not args.reason.strip()):
        raise Failure("--reason TEXT is required: an erasure records why it was made", code=2)
    with open_ledger(args, read_only=args.dry_run) as ledger:
        if args.dry_run:
            plan = (
                _idle_plan(ledger, args.idle_days) if args.idle_days is not None else _one_plan(ledger, args)
            )
            return _show_plan(args, plan)
        erase = getattr(ledger, "erase", None)
        if erase is None:
            raise Failure("this version of contextledger cannot erase (no Ledger.erase)")
        if args.idle_days is not None:
            from contextledger.application.privacy.retention import enforce_retention

            reports = enforce_retention(ledger, erase, args.idle_days)
        elif args.subject is not None:
            reports = [erase(subject=args.subject, reason=args.reason, force=args.force)]
        else:
            reports = [erase(conversation=args.conversation, reason=args.reason)]
        _erase_from_read_models(ledger)
    return _show_reports(args, reports)


def _erase_from_read_models(ledger: Ledger) -> None:
    """Bring the store's read models, if it has any, past the erasure just recorded, so
    that their rows of the erased conversations are deleted now (on SQLite with their
    bytes overwritten), not when a worker next runs: a store without a master key
    holds their values in clear."""
    from contextledger.infrastructure.persistence.database import Database
    from contextledger.infrastructure.readmodels import SQLReadModels

    database = Database.parse(ledger.settings.database_url)
    if database.kind == "memory" or (
        database.kind == "sqlite" and (database.views_path is None or not database.views_path.exists())
    ):
        return
    models = SQLReadModels.for_ledger(ledger, create=False)
    if not models.has_tables():
        models.close()
        return
    ledger.attach(models.runner(ledger))
    if not ledger.wait_idle(120):
        raise Failure(
            "the erasure is recorded, but the read models did not catch up: run 'contextledger worker'"
        )


# -- the dry run ---------------------------------------------------------------------------


def _idle_plan(ledger: Ledger, days: int) -> dict[str, Any]:
    from contextledger.application.privacy.retention import retention_plan, retention_reason

    dues = retention_plan(ledger, days)
    return {
        "dry_run": True,
        "idle_days": days,
        "reason": retention_reason(days),
        "subjects": [
            {
                "subject": d.subject,
                "conversations": [str(c) for c in d.conversations],
                "last_event_at": d.last_event_at.isoformat(),
            }
            for d in dues
        ],
        "conversations": sum(len(d.conversations) for d in dues),
    }


def _one_plan(ledger: Ledger, args: argparse.Namespace) -> dict[str, Any]:
    """The subject named (or the conversation's) and its conversations."""
    from contextledger.application.privacy.subjects import check_subject

    ids = ledger.conversation_ids()
    if args.subject is not None:
        subject = check_subject(args.subject)
    else:
        cid: UUID = args.conversation
        if cid not in ids:
            raise Failure(f"no conversation {cid} in this store", code=2)
        subject = ledger.subjects.subject_of(cid) or str(cid)
    of_subject = [c for c in ids if (ledger.subjects.subject_of(c) or str(c)) == subject]
    plan: dict[str, Any] = {
        "dry_run": True,
        "reason": args.reason,
        "subjects": [{"subject": subject, "conversations": [str(c) for c in of_subject]}],
        "conversations": len(of_subject),
    }
    if args.subject is not None and not of_subject and not args.force and not ledger.erasures.knows(subject):
        plan["refused"] = (
            f"no conversation names subject {subject!r} and it was never erased: "
            "--force erases the name anyway (pre-empting it)"
        )
    if args.conversation is not None and len(of_subject) > 1:
        plan["refused"] = (
            f"conversation {args.conversation} is one of {len(of_subject)} conversations "
            f"of subject {subject!r}: erase the subject (--subject)"
        )
    return plan


def _show_plan(args: argparse.Namespace, plan: dict[str, Any]) -> int:
    if args.json:
        print(render.dump(plan))
        return 0
    for entry in plan["subjects"]:
        since = f", last event {entry['last_event_at']}" if "last_event_at" in entry else ""
        count = len(entry["conversations"])
        render.out(
            f"would erase subject {render.visible(entry['subject'])}: "
            f"{count} conversation{'s' if count != 1 else ''}{since}"
        )
        for cid in entry["conversations"]:
            render.out(f"  {cid}")
    if "refused" in plan:
        render.out(f"refused: {plan['refused']}")
    render.out(
        f"dry run: {len(plan['subjects'])} subject{'s' if len(plan['subjects']) != 1 else ''}, "
        f"{plan['conversations']} conversations; nothing erased"
    )
    return 0


# -- the erasure -----------------------------------------------------------------------------


def _as_record(report: Any) -> dict[str, Any]:
    if dataclasses.is_dataclass(report) and not isinstance(report, type):
        fields = dataclasses.asdict(report)
    else:
        fields = dict(vars(report))
    return {
        key: (
            [str(v) for v in value]
            if isinstance(value, tuple | list)
            else value.isoformat()
            if isinstance(value, datetime)
            else value
        )
        for key, value in fields.items()
    }


def _with_receipt(report: Any) -> dict[str, Any]:
    """The report's fields with its receipt's (``--json``: the file ``verify --receipt`` reads)."""
    record = _as_record(report)
    receipt = record.pop("receipt", None)
    found = getattr(report, "receipt", None)
    if receipt is not None and found is not None:
        record.update(found.to_json())
    return record


def _receipt_lines(record: dict[str, Any]) -> list[str]:
    """The receipt in a few lines of text."""
    if "record_digest" not in record:
        return []
    ranges = record.get("ranges", [])
    events = sum(r["events"] for r in ranges)
    lines = [
        f"receipt: {events} records erased in {len(ranges)} conversations"
        + (f" ({len(record['forks'])} forks of other subjects)" if record.get("forks") else ""),
    ]
    for r in ranges:
        lines.append(
            f"  {r['conversation_id']}: {r['events']} records, "
            f"versions {r['first_version']}-{r['last_version']}"
        )
    lines.append(f"  keys destroyed   {', '.join(record.get('key_ids', [])) or 'none'}")
    lines.append(f"  record digest    {record['record_digest']} (sha256 of the ContentErased record)")
    lines.append(
        "  keep it: contextledger erase ... --json > receipt.json; "
        "contextledger verify --receipt receipt.json"
    )
    return lines


def _show_reports(args: argparse.Namespace, reports: list[Any]) -> int:
    records = [_with_receipt(r) for r in reports]
    if args.json:
        print(render.dump(records if args.idle_days is not None else records[0]))
        return 0
    for record in records:
        count = len(record.get("conversations", ()))
        state = "was erased already" if record.get("already_erased") else "erased"
        render.out(
            f"subject {render.visible(str(record.get('subject')))} {state} at "
            f"{record.get('erased_at')}: {count} conversation{'s' if count != 1 else ''} "
            f"({render.visible(str(record.get('reason')))})"
        )
        for cid in record.get("conversations", ()):
            render.out(f"  {cid}")
        for line in _receipt_lines(record):
            render.out(line)
    if args.idle_days is not None:
        render.out(f"retention: {len(records)} subject{'s' if len(records) != 1 else ''} erased")
    return 0
