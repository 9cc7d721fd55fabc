"""The ``contextledger`` command line, for operators.

``--database URL`` (default: ``CONTEXTLEDGER_DATABASE_URL``, else
``sqlite:///contextledger.db``), ``--json`` and ``--debug`` may come before or after
the command. Exit status: 0 success, 1 failure, 2 usage error, 130 interrupted; the
reason in one line on stderr.

    contextledger init                      # create the database (nothing else creates one)
    contextledger list [--json]             # conversations, newest activity first
    contextledger context CID [--version V]
    contextledger transcript CID
    contextledger close-tool-calls CID [--message TEXT]
    contextledger replay CID | --all
    contextledger export [CID]              # JSON lines
    contextledger verify [CID]
    contextledger stats [CID]
    contextledger rebuild [NAME]
    contextledger worker [--shard I/N] [--once]
    contextledger demo                      # a long conversation end to end, with a report
    contextledger serve                     # the audit viewer (extra [web])

One module per command group in ``commands/`` (``init``, ``conversations``, ``audit``,
``stats``, ``whatif``, ``rebuild``, ``worker``, ``erase``, ``keys``, ``demo``,
``serve``), each with ``register(subparsers)``; ``app.main`` puts them together;
``common``, ``connect``, ``render``, ``signals``, ``catchup`` and ``waiting`` are what
they share.

The top of the infrastructure layer. May import: web, demo, readmodels, persistence,
keys, summarizers, counting, the layer's loose modules, the application layer and the
domain.
"""

from contextledger.infrastructure.cli.app import build_parser, main

__all__ = ["build_parser", "main"]
