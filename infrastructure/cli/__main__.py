"""``python -m contextledger.infrastructure.cli``: the command line."""

from contextledger.infrastructure.cli import main

raise SystemExit(main())
