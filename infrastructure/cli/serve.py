"""``contextledger serve``: the read-only audit viewer in the browser.

The viewer lives in ``contextledger.infrastructure.web`` and needs the ``web`` extra;
it is imported only when the command runs, so the rest of the command line works
without it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from contextledger.application.settings import Settings
from contextledger.infrastructure.database import Database

__all__ = ["register"]

#: The modules of the ``web`` extra.
WEB_MODULES = frozenset({"starlette", "jinja2", "uvicorn", "markupsafe"})


def _port(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a port number") from None
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError(f"port {value!r} must be 0 to 65535 (0: any free port)")
    return number


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add ``serve`` to the command line's subcommands."""
    serve = subparsers.add_parser(
        "serve",
        help="browse conversations, their events and their contexts (read-only)",
        description=(
            "Serves a read-only audit viewer: the conversations (searchable, newest activity "
            "first), each conversation's event timeline with its integrity check and a chart "
            "of tokens sent per model turn, and the exact context the model was sent at any "
            "version. Every page is also JSON (add .json or ?format=json). Nothing is "
            "written to the store. Needs the web extra: pip install 'contextledger[web]'."
        ),
    )
    serve.add_argument(
        "--database",
        metavar="URL",
        help=(
            "the event store: sqlite:///file.db, postgresql://user@host:5432/db[?schema=s] "
            "(default: $CONTEXTLEDGER_DATABASE_URL, else sqlite:///contextledger.db)"
        ),
    )
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only)")
    serve.add_argument("--port", type=_port, default=8765,
                       help="port to listen on (default 8765; 0 picks a free one)")
    serve.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    url: str = args.database if args.database is not None else Settings.from_env().database_url
    path = Database.parse(url).path
    if url.startswith("sqlite") and path is not None and not path.exists():
        print(f"contextledger serve: error: no database at {path} (check --database)", file=sys.stderr)
        return 2
    try:
        from contextledger.infrastructure.web import run
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in WEB_MODULES:
            raise
        print(
            f"contextledger serve: error: the viewer needs the web extra ({exc.name} is not "
            "installed): pip install 'contextledger[web]'",
            file=sys.stderr,
        )
        return 2
    run(url, host=args.host, port=args.port)
    return 0

