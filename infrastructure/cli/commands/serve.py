"""``contextledger serve``: the read-only audit viewer in the browser.

The viewer lives in ``contextledger.infrastructure.web`` and needs the ``web`` extra;
it is imported only when the command runs, so the rest of the command line works
without it.
"""

from __future__ import annotations

import argparse
from typing import Any

from contextledger.infrastructure.cli.common import Failure, add_command
from contextledger.infrastructure.cli.connect import databases, require_existing

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
    serve = add_command(
        subparsers,
        "serve",
        "browse conversations, their events and their contexts (read-only)",
        "Serves a read-only audit viewer: the conversations (searchable, newest activity "
        "first), each conversation's event timeline with its integrity check and a chart "
        "of tokens sent per model turn, and the exact context the model was sent at any "
        "version. Every page is also JSON (add .json or ?format=json). Nothing is "
        "written to the store. Needs the web extra: pip install 'contextledger[web]'.",
    )
    serve.add_argument("--host", default="127.0.0.1",
                       help="address to listen on (default 127.0.0.1: this machine only; any "
                            "other address prints a warning: the viewer has no authentication)")
    serve.add_argument("--port", type=_port, default=8765,
                       help="port to listen on (default 8765; 0 picks a free one)")
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    dbs = databases(args)
    if len(dbs) > 1:
        raise Failure("the viewer serves one store: give it one store's URL with --database", code=2)
    db = dbs[0]
    require_existing(db)
    try:
        from contextledger.infrastructure.web import run
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in WEB_MODULES:
            raise
        raise Failure(
            f"the viewer needs the web extra ({exc.name} is not installed): "
            "pip install 'contextledger[web]'",
            code=2,
        ) from None
    run(db.url.render_as_string(hide_password=False) if db.kind != "memory" else "memory://",
        host=args.host, port=args.port)
    return 0
