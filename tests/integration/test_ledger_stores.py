"""The ledger contract on each store."""

from __future__ import annotations

from pathlib import Path

import pytest

from contextledger.testing.contracts import LedgerContract


class TestMemoryLedger(LedgerContract):
    persistent = False

    @pytest.fixture
    def url(self) -> str:
        return "memory://"


class TestSQLiteLedger(LedgerContract):
    @pytest.fixture
    def url(self, tmp_path: Path) -> str:
        return f"sqlite:///{tmp_path / 'ledger.db'}"


@pytest.mark.postgres
class TestPostgresLedger(LedgerContract):
    @pytest.fixture
    def url(self, postgres_url: str) -> str:
        return postgres_url
