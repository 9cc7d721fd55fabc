"""``contextledger keys rotate``: re-wrap every data key under a new master key;
``contextledger keys show``: where the data keys are kept, and what a backup of each
store then holds (docs/privacy.md, "Keys apart from the log")."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, Parser, add_command, add_global_options
from contextledger.infrastructure.cli.connect import open_ledger

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``keys`` (with ``keys rotate`` and ``keys show``)."""
    keys = add_command(
        subparsers,
        "keys",
        "rotate the master key of the data keys; show where they are kept",
        "Data keys of data subjects are kept wrapped under the master key "
        "($CONTEXTLEDGER_CIPHER_KEY). 'keys rotate --new-key KEY' re-wraps every one of them "
        "under KEY, in one transaction per store; no record is rewritten, and an interrupted "
        "rotation is finished by running it again. Then set $CONTEXTLEDGER_CIPHER_KEY to KEY "
        "everywhere and restart every process: one still on the old key refuses to make data "
        "keys. The master key in use must be the store's current one and KEY 32 bytes, or "
        "nothing changes. Records written before per-subject keys (or with key_scope=store) "
        "stay under the old master key itself: keep it while the store holds any "
        "(docs/privacy.md).",
    )
    actions = keys.add_subparsers(dest="keys_action", metavar="ACTION", required=True, parser_class=Parser)
    rotate = actions.add_parser(
        "rotate",
        help="re-wrap every data key under a new master key",
        description="Re-wrap every data key under the new master key (see 'keys --help').",
    )
    add_global_options(rotate)
    rotate.add_argument(
        "--new-key",
        metavar="KEY",
        dest="new_key",
        required=True,
        help="the new master key, 32 bytes in base64; '-' reads it from stdin "
        "(keeps it out of the process list)",
    )
    rotate.set_defaults(handler=run)
    show = actions.add_parser(
        "show",
        help="where the data keys are kept, and what a backup of each store holds",
        description="Show the stores' layout: the event store(s), where the key table is (in "
        "the store, or in the key store of --key-store / $CONTEXTLEDGER_KEY_STORE), how many "
        "data keys it holds and whether they are wrapped under a master key, and what a "
        "backup of each store then holds. Reads only.",
    )
    add_global_options(show)
    show.set_defaults(handler=run_show)


def layout(ledger: Any) -> dict[str, Any]:
    """The stores' layout (see ``keys show``)."""
    from contextledger.infrastructure.keys.subject_keys import CHECK_SUBJECT, UNWRAPPED
    from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

    key_store = ledger.settings.key_store
    keys = [subject_keys_of(shard) for shard in ledger.shards]
    tables = {k.table.where: k for k in keys if k is not None}
    held = {
        where: [r for r in k.table.wrapped() if r.subject != CHECK_SUBJECT] for where, k in tables.items()
    }
    wrapped = ledger.settings.cipher_key is not None
    event_backup = (
        "records under data keys it does not hold, erasure records, the key store's id and URL"
        if key_store
        else "records and their data keys (every subject not yet erased reads again from it)"
    )
    return {
        "event_stores": [str(s) for s in ledger.settings.store_urls],
        "key_store": None if key_store is None else next(iter(tables), key_store),
        "key_tables": [
            {
                "where": where,
                "data_keys": len(rows),
                "wrapped": any(r.master_id != UNWRAPPED for r in rows) if rows else wrapped,
            }
            for where, rows in held.items()
        ],
        "backup_of_event_store_holds": event_backup,
        "backup_of_key_store_holds": (
            "every live subject's data key, tombstones, subject names; no content (restored, it "
            "brings back the keys of subjects erased since: erase --reapply)"
            if key_store
            else None
        ),
    }


def run_show(args: argparse.Namespace) -> int:
    """``keys show``."""
    from contextledger.application.shared.settings import masked_url

    with open_ledger(args, read_only=True) as ledger:
        found = layout(ledger)
    found["event_stores"] = [str(masked_url(u)) for u in found["event_stores"]]
    if args.json:
        print(render.dump(found))
        return 0
    lines = [f"event store: {u}" for u in found["event_stores"]]
    lines.append(f"key table:   {found['key_store'] or 'in the event store itself'}")
    for table in found["key_tables"]:
        how = "wrapped under the master key" if table["wrapped"] else "unwrapped (no master key)"
        count = table["data_keys"]
        lines.append(f"  {table['where']}: {count} data key{'' if count == 1 else 's'}, {how}")
    lines.append(f"a backup of the event store holds: {found['backup_of_event_store_holds']}")
    if found["backup_of_key_store_holds"]:
        lines.append(f"a backup of the key store holds:   {found['backup_of_key_store_holds']}")
    render.out("\n".join(lines))
    return 0


def run(args: argparse.Namespace) -> int:
    """``keys rotate --new-key KEY``."""
    from contextledger.infrastructure.keys.aead import decode_key
    from contextledger.infrastructure.keys.subject_keys import MASTER_KEY_SIZE
    from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

    new_key = sys.stdin.readline().strip() if args.new_key == "-" else args.new_key
    if len(decode_key(new_key, setting="new_key")) != MASTER_KEY_SIZE:  # before anything is opened
        raise Failure(f"--new-key must be {MASTER_KEY_SIZE} bytes in base64, as the help says", code=2)
    counts: list[int] = []
    with open_ledger(args) as ledger:
        old = ledger.settings.cipher_key
        if old is None:
            raise Failure(
                "no master key is set ($CONTEXTLEDGER_CIPHER_KEY): there is nothing to rotate", code=2
            )
        if decode_key(old.get_secret_value()) == decode_key(new_key):
            raise Failure("--new-key is the master key in use: give a new one", code=2)
        for shard in ledger.shards:
            keys = subject_keys_of(shard)
            if keys is None:
                raise Failure("the store keeps no data keys (key_scope=store?): nothing to rotate", code=2)
            counts.append(keys.rewrap(old.get_secret_value(), new_key))
    if args.json:
        print(render.dump({"rewrapped": sum(counts), "per_store": counts}))
    else:
        render.out(
            f"re-wrapped {sum(counts)} data key{'s' if sum(counts) != 1 else ''} under the new "
            "master key: set CONTEXTLEDGER_CIPHER_KEY to it everywhere"
        )
    return 0
