"""Imported by the tests' forkserver (``processes.PRELOAD``): it loads the two shipped
tiktoken encodings once, so that every process forked from it counts tokens without
parsing them again (about half a second of CPU each, more on a loaded machine)."""

from __future__ import annotations

from contextledger.infrastructure.counting.tokens import TiktokenCounter

for _model in ("gpt-4o-mini", "gpt-4"):  # o200k_base, cl100k_base
    TiktokenCounter(_model)
