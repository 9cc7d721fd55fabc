"""``contextledger erase --export-journal FILE`` and ``erase --reapply FILE_OR_URL``:
the erasures of a store kept apart from it, and made again in a store restored from a
backup taken before them.

A backup holds the data keys of every subject not yet erased when it was taken: a
store restored from it can read them again, and its log has no ``ContentErased`` for
erasures made since. The erasure journal is those records (one JSON object a line:
``subject``, ``conversations``, ``forks``, ``reason``, ``erased_at``; nothing of the
content), exported from the live store (``--export-journal``, ``-`` for stdout) after
each erasure or as often as backups are taken. ``--reapply`` reads a journal file, or
the log of a store given by URL (the live store, when it survived), and erases each
subject again in the store at ``--database``: its key is tombstoned and a
``ContentErased`` recorded (its reason says it was re-applied, and when the subject
was first erased), so that read models and followers drop what they hold of it. A
subject the restored store erased already is reported as such and left alone: running
it twice changes nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterable, Iterator
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure
from contextledger.infrastructure.cli.connect import check_postgres, open_ledger, settings_for

if TYPE_CHECKING:
    from contextledger.application.facade.ledger import Ledger

__all__ = ["export_journal", "journal", "read_journal", "reapply", "run_journal"]

#: The fields of one journal line (all required).
FIELDS = ("subject", "conversations", "forks", "reason", "erased_at")


def journal(ledger: Ledger) -> list[dict[str, Any]]:
    """Every erasure recorded in ``ledger``'s stores, oldest first, as journal lines."""
    from contextledger.application.following.notifications import read_notifications
    from contextledger.domain.erasure import ContentErased

    found: list[dict[str, Any]] = []
    for shard in ledger.shards:
        for page in read_notifications(shard.notification_log, topics=(ContentErased.TOPIC,), committed=True):
            for notification in page:
                event = shard.mapper.to_domain_event(notification)
                if isinstance(event, ContentErased):
                    found.append(
                        {
                            "subject": event.subject,
                            "conversations": [str(c) for c in event.conversations],
                            "forks": [str(c) for c in event.forks],
                            "reason": event.reason,
                            "erased_at": event.timestamp.isoformat(),
                        }
                    )
    found.sort(key=lambda line: str(line["erased_at"]))
    return found


def export_journal(lines: list[dict[str, Any]], target: str) -> None:
    """Write ``lines`` to the file ``target`` (whole or not at all), or stdout (``-``)."""
    text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in lines)
    if target == "-":
        sys.stdout.write(text)
        return
    path = Path(target)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or Path("."))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _checked(line: Any, where: str) -> dict[str, Any]:
    if not isinstance(line, dict) or any(field not in line for field in FIELDS):
        raise Failure(f"{where}: not an erasure journal line (needs {', '.join(FIELDS)})", code=2)
    if not isinstance(line["subject"], str) or not line["subject"]:
        raise Failure(f"{where}: the subject is not a non-empty string", code=2)
    if not isinstance(line["reason"], str):
        raise Failure(f"{where}: the reason is not a string", code=2)
    try:
        datetime.fromisoformat(str(line["erased_at"]))
    except ValueError:
        raise Failure(f"{where}: erased_at is not an ISO time", code=2) from None
    return line


def _file_lines(path: Path) -> Iterator[dict[str, Any]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise Failure(f"cannot read the erasure journal {path}: {exc.strerror or exc}", code=2) from None
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            line = json.loads(raw)
        except json.JSONDecodeError:
            raise Failure(f"{path}:{number}: not JSON", code=2) from None
        yield _checked(line, f"{path}:{number}")


def read_journal(source: str) -> list[dict[str, Any]]:
    """The journal in the file ``source``, or the erasures in the log of the store whose
    URL ``source`` is (opened read-only). Every line is checked before any is used."""
    if "://" not in source:
        return list(_file_lines(Path(source)))
    from contextledger.application.facade.ledger import Ledger
    from contextledger.infrastructure.persistence.database import Database

    db = Database.parse(source)
    if db.kind == "postgresql":
        check_postgres(db)
    with Ledger.open(settings=settings_for(db, run_policy=False), read_only=True) as live:
        return journal(live)


def reapply(ledger: Ledger, lines: Iterable[dict[str, Any]]) -> list[Any]:
    """Erase each subject of ``lines`` again in ``ledger`` (once each, in journal order);
    the erasure reports (``already_erased`` for those the store had erased)."""
    from contextledger.domain.values.validation import MAX_REASON_CHARS

    reports: list[Any] = []
    seen: set[str] = set()
    for line in lines:
        subject = line["subject"]
        if subject in seen:
            continue
        seen.add(subject)
        note = f" (re-applied after a restore; first erased {line['erased_at']})"
        reason = str(line["reason"])[: MAX_REASON_CHARS - len(note)] + note
        reports.append(ledger.erase(subject=subject, reason=reason))
    return reports


def run_journal(args: argparse.Namespace) -> int:
    """``erase --export-journal FILE`` or ``erase --reapply FILE_OR_URL``."""
    if args.reason is not None or args.dry_run:
        raise Failure("--export-journal and --reapply take no --reason and no --dry-run", code=2)
    if args.export_journal is not None:
        with open_ledger(args, read_only=True) as ledger:
            lines = journal(ledger)
        export_journal(lines, args.export_journal)
        if args.export_journal != "-":
            render.out(
                f"{len(lines)} erasure{'s' if len(lines) != 1 else ''} written to {args.export_journal}"
            )
        return 0
    lines = read_journal(args.reapply)
    with open_ledger(args) as ledger:
        reports = reapply(ledger, lines)
    again = [r for r in reports if not r.already_erased]
    if args.json:
        print(
            render.dump(
                [
                    {
                        "subject": r.subject,
                        "conversations": [str(c) for c in r.conversations],
                        "already_erased": r.already_erased,
                    }
                    for r in reports
                ]
            )
        )
        return 0
    for r in reports:
        state = "was erased already" if r.already_erased else "erased again"
        render.out(f"subject {render.visible(r.subject)} {state}: {len(r.conversations)} conversations")
    render.out(f"re-applied: {len(again)} erased again, {len(reports) - len(again)} erased already")
    return 0
