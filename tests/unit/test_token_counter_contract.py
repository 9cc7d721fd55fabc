"""The tiktoken counter against the TokenCounter contract."""

from __future__ import annotations

from contextledger.application import TokenCounter
from contextledger.infrastructure.counting.tokens import TiktokenCounter
from contextledger.testing.contracts import TokenCounterContract


class TestTiktokenCounterO200k(TokenCounterContract):
    def make_counter(self) -> TokenCounter:
        return TiktokenCounter("gpt-4o-mini")


class TestTiktokenCounterCl100k(TokenCounterContract):
    def make_counter(self) -> TokenCounter:
        return TiktokenCounter("gpt-4")
