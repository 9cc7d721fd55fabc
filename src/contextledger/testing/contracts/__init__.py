"""Contract suites to run against your own adapters, as pytest test classes.

Each suite is an abstract base class: pytest collects only your subclass, which says
how to make the thing under test (``make_summarizer``, ``make_counter``, or the
``url`` fixture of a store). The suites are pytest test classes: importing them
imports pytest (and has pytest explain their failed assertions).
"""

from __future__ import annotations

import pytest

# pytest explains a failed ``assert`` in test modules only: these suites are imported
# by them, so their assertions are rewritten too.
pytest.register_assert_rewrite(
    "contextledger.testing.contracts.ledger",
    "contextledger.testing.contracts.summarizer",
    "contextledger.testing.contracts.token_counter",
)

from contextledger.testing.contracts.ledger import LedgerContract  # noqa: E402
from contextledger.testing.contracts.summarizer import SummarizerContract, contract_request  # noqa: E402
from contextledger.testing.contracts.token_counter import TokenCounterContract  # noqa: E402

__all__ = ["LedgerContract", "SummarizerContract", "TokenCounterContract", "contract_request"]
