"""``contextledger init``: create the database (event store and read-model tables).

Besides ``demo``, the only command that creates a database; every other command
refuses a SQLite file that is not there, so a mistyped path never leaves an empty
database behind.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from contextledger.infrastructure.cli import render
from contextledger.infrastructure.cli.common import Failure, add_command
from contextledger.infrastructure.cli.connect import check_postgres, databases, settings_for

if TYPE_CHECKING:
    from contextledger.infrastructure.persistence.database import Database

__all__ = ["register"]


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add ``init``."""
    init = add_command(
        subparsers,
        "init",
        "create the database: the event store and the read-model tables",
        "Creates the event store and the read-model tables at --database (a SQLite file, "
        "with its read models in FILE.views.db, or a PostgreSQL database/schema). Running "
        "it on a database that exists already changes nothing. The folder of a SQLite "
        "file must exist.",
    )
    init.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Create the database at ``--database`` (or every ``--store``: a store added to
    a running deployment is created this way before the processes are given it)."""
    dbs = databases(args)
    if len(dbs) == 1:
        return _init(args, dbs[0])
    for db in dbs:
        _init(args, db)
    return 0


def _init(args: argparse.Namespace, db: Database) -> int:
    from contextledger.application.facade.ledger import Ledger
    from contextledger.infrastructure.readmodels import SQLReadModels

    if db.kind == "memory":
        raise Failure("memory:// lives only as long as one command; nothing to create", code=2)
    existed = db.exists() if db.kind == "sqlite" else None
    if db.kind == "postgresql":
        check_postgres(db)
    with Ledger.open(settings=settings_for(db, run_policy=False)) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        models.close()
        conversations = len(ledger.conversation_ids())
    if getattr(args, "json", False):
        print(render.dump({"database": db.masked, "created": existed is False,
                           "conversations": conversations}))
        return 0
    if existed:
        held = render.counted(conversations, "conversation")
        render.out(f"{db.masked}: exists already ({held}); tables checked")
    elif existed is False:
        render.out(f"created {db.masked} (event store; read models in {db.views_path})")
    else:
        render.out(f"{db.masked}: event store and read-model tables ready "
                   f"({render.counted(conversations, 'conversation')})")
    return 0
