"""``contextledger keys rotate``: re-wrap every data key under a new master key."""

from __future__ import annotations

import argparse
import sys

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, Parser, add_command, add_global_options
from contextledger.infrastructure.cli.connect import open_ledger

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``keys`` (with ``keys rotate``)."""
    keys = add_command(
        subparsers,
        "keys",
        "rotate the master key of the data keys",
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
