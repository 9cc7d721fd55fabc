"""``python -m contextledger.infrastructure.cli``."""

from contextledger.infrastructure.cli.app import main

raise SystemExit(main())
