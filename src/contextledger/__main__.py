"""``python -m contextledger``: the command line."""

import sys

from contextledger import main

sys.exit(main())
