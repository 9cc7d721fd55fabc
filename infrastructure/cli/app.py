"""``main(argv)``: build the parser from the command modules, run one command, map
its outcome to an exit status.

Exit status: 0 success; 1 failure (a check failed, the store failed); 2 usage error
(bad argument, unknown conversation, no database there); 130 interrupted (Ctrl-C).
Errors are one line on stderr; a database password never appears in them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import Any

from contextledger.domain.values.errors import ContextLedgerError, UsageError
from contextledger.infrastructure.cli.common import Failure, Parser, add_global_options

__all__ = ["COMMAND_MODULES", "PROG", "build_parser", "main"]

PROG = "contextledger"

#: The command modules, in the order ``--help`` lists their commands. Each defines
#: ``register(subparsers)``. A module that cannot be imported (an optional one, or
#: one whose extra is not installed) is left out; the others work regardless.
COMMAND_MODULES = (
    "init",
    "conversations",
    "audit",
    "stats",
    "whatif",
    "rebuild",
    "worker",
    "erase",
    "keys",
    "demo",
    "serve",
)
_PACKAGE = "contextledger.infrastructure.cli.commands"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("contextledger")
    except PackageNotFoundError:
        return "unknown"


class _VersionAction(argparse.Action):
    """``--version``: the installed version, looked up only when asked for."""

    def __init__(self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, **kwargs: Any) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show the version and exit",
            **kwargs,
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        sys.stdout.write(f"{PROG} {_version()}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``contextledger`` (one subparser per command)."""
    parser = Parser(
        prog=PROG,
        description="Event-sourced LLM conversation memory: inspect, audit and operate a ledger.",
        epilog="Exit status: 0 success, 1 failure (check failed, store error), 2 usage error, "
        "130 interrupted. --database, --json and --debug may also follow the command.",
    )
    parser.add_argument("--version", action=_VersionAction)
    add_global_options(parser, top=True)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{_PACKAGE}.{name}")
        except ImportError as exc:
            if exc.name not in (f"{_PACKAGE}.{name}",) and name != "serve":
                raise
            continue
        module.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status. The commands' modules are light:
    each loads the ledger, SQLAlchemy and the rest when it runs, so ``--help`` and
    ``--version`` load none of them."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return _exit_code(exc)
    from contextledger.application.shared.settings import absolute_tiktoken_cache_dir

    absolute_tiktoken_cache_dir()
    if getattr(args, "handler", None) is None:
        parser.print_help(sys.stderr)
        return 2
    where = f"{PROG} {args.command}"
    secrets = _secrets(args)
    from contextledger.infrastructure.cli import render
    from contextledger.infrastructure.cli.connect import key_store_given

    try:
        with key_store_given(getattr(args, "key_store", None)):
            return int(args.handler(args))
    except Failure as exc:
        render.error(where, str(exc), secrets=secrets)
        return exc.code
    except UsageError as exc:
        render.error(where, _named(exc, args), secrets=secrets)
        return 2
    except ContextLedgerError as exc:
        render.error(where, str(exc), secrets=secrets)
        return 1
    except KeyboardInterrupt:
        render.error(where, "interrupted; what was written before stays consistent")
        return 130
    except BrokenPipeError:
        return 0
    except Exception as exc:
        if args.debug:
            raise
        render.error(
            where,
            f"unexpected {type(exc).__name__}: {exc} (rerun with --debug for a traceback)",
            secrets=secrets,
        )
        return 1


def _named(exc: UsageError, args: argparse.Namespace) -> str:
    """``exc``'s message; for a conversation the operator named by its key, the key
    rather than the id it stands for."""
    from contextledger.domain.values.errors import ConversationNotFoundError
    from contextledger.infrastructure.cli.common import ConversationName

    if isinstance(exc, ConversationNotFoundError):
        for value in vars(args).values():
            for named in value if isinstance(value, list) else [value]:
                if isinstance(named, ConversationName) and named == exc.conversation_id:
                    at = "" if exc.version is None else f" at version {exc.version}"
                    return f"no conversation has the key {named.key!r}{at}"
    return str(exc)


def _exit_code(exc: SystemExit) -> int:
    code = exc.code
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _secrets(args: argparse.Namespace) -> tuple[str, ...]:
    """The passwords of ``--database`` and ``--key-store`` (or the environment's),
    never to be shown."""
    from contextledger.application.shared.settings import Settings
    from contextledger.infrastructure.persistence.database import Database

    try:
        url = getattr(args, "database", None) or Settings.from_env().database_url
        keys = getattr(args, "key_store", None) or Settings.from_env().key_store
        found = [Database.parse(u).url.password for u in (url, keys) if u]
    except ContextLedgerError:
        return ()
    return tuple(str(p) for p in found if p)
