"""What every command module shares: the ``Failure`` exit, argument types and the
options every subcommand takes.

The command-module convention: a module under ``contextledger.infrastructure.cli``
defines ``register(subparsers)``, which adds its subcommand(s) with ``add_command``
and ``set_defaults(handler=...)``; a handler takes the parsed ``args`` and returns
the exit status. ``--database``, ``--store``, ``--key-store``, ``--json`` and ``--debug``
are global options: given before the subcommand or after it, they mean the same.
"""

from __future__ import annotations

import argparse
from typing import NoReturn
from uuid import UUID

from contextledger.domain.values.errors import InvalidArgumentError

__all__ = [
    "DATABASE_HELP",
    "ConversationName",
    "Failure",
    "Parser",
    "add_command",
    "add_global_options",
    "conversation_id",
    "non_negative_int",
    "positive_int",
    "shard",
]

DATABASE_HELP = (
    "the event store: sqlite:///file.db, postgresql://user@host:5432/db[?schema=s] or "
    "memory:// (default: {default})"
)
_DEFAULT_DATABASE = "$CONTEXTLEDGER_DATABASE_URL, else sqlite:///contextledger.db"


class Parser(argparse.ArgumentParser):
    """Usage errors in one line on stderr, exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {' '.join(message.split())} (see --help)\n")


class Failure(Exception):
    """A command failed for a reason already phrased for the operator."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class ConversationName(UUID):
    """A conversation id the operator named by its key: the id, remembering ``key``, so
    that an error about it names what the operator typed."""

    key: str

    def __init__(self, conversation_id: UUID, key: str) -> None:
        super().__init__(int=conversation_id.int)
        object.__setattr__(self, "key", key)


def conversation_id(value: str) -> UUID:
    """Argument type: a conversation, named by its id (a UUID) or by the application's
    string key (``start(..., key=...)``), resolved as the ledger resolves them."""
    from contextledger.application.shared.addressing import resolve

    try:
        resolved = resolve(value, argument="CID")
        try:
            UUID(value)
        except ValueError:
            return ConversationName(resolved, value)
        return resolved
    except InvalidArgumentError as exc:
        shown = value.encode("utf-8", "backslashreplace").decode("ascii", "backslashreplace")
        if len(shown) > 60:
            shown = shown[:57] + "..."
        raise argparse.ArgumentTypeError(
            f"invalid conversation id or key '{shown}': {exc.message} (expected a UUID such as "
            "3f2b8c1e-0d4a-4e5f-9a6b-7c8d9e0f1a2b or a key such as chat-7)"
        ) from None


def _whole_number(value: str, minimum: int) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from None
    if number < minimum:
        raise argparse.ArgumentTypeError(f"{value!r} must be {minimum} or more")
    return number


def positive_int(value: str) -> int:
    """Argument type: a whole number of 1 or more."""
    return _whole_number(value, 1)


def non_negative_int(value: str) -> int:
    """Argument type: a whole number of 0 or more."""
    return _whole_number(value, 0)


def shard(value: str) -> tuple[int, int]:
    """Argument type: ``I/N``, shard I of N."""
    try:
        index, count = (int(part) for part in value.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"shard {value!r} must look like I/N, e.g. 0/4") from None
    if count < 1 or not 0 <= index < count:
        raise argparse.ArgumentTypeError(f"shard {value!r} needs 0 <= I < N")
    return index, count


def add_global_options(
    parser: argparse.ArgumentParser, *, top: bool = False, database_default: str | None = None
) -> None:
    """``--database``, ``--json`` and ``--debug``. On a subcommand (not ``top``) they
    default to "not given", so the same option given before the subcommand counts."""
    parser.add_argument(
        "--database",
        metavar="URL",
        default=None if top else argparse.SUPPRESS,
        help=DATABASE_HELP.format(default=database_default or _DEFAULT_DATABASE),
    )
    parser.add_argument(
        "--store",
        metavar="URL",
        action="append",
        dest="stores",
        default=None if top else argparse.SUPPRESS,
        help="one of several stores (shards), in their order; repeat it for each "
        "(default: $CONTEXTLEDGER_STORES); not with --database",
    )
    parser.add_argument(
        "--key-store",
        metavar="URL",
        default=None if top else argparse.SUPPRESS,
        help="where the data keys are kept, apart from the event store: another SQLite file "
        "or PostgreSQL database (default: $CONTEXTLEDGER_KEY_STORE, else the store itself; "
        "docs/privacy.md)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="print machine-readable JSON instead of text",
    )
    parser.add_argument(
        "--debug",
        action="store_true",
        default=False if top else argparse.SUPPRESS,
        help="show tracebacks of unexpected errors" if top else argparse.SUPPRESS,
    )


def add_command(
    subparsers: argparse._SubParsersAction,  # type: ignore[type-arg]
    name: str,
    summary: str,
    description: str,
    *,
    database_default: str | None = None,
) -> argparse.ArgumentParser:
    """Add subcommand ``name`` with the global options; the caller adds its own
    arguments and ``set_defaults(handler=...)``."""
    sub: argparse.ArgumentParser = subparsers.add_parser(name, help=summary, description=description)
    add_global_options(sub, database_default=database_default)
    return sub
