"""Checks that the SQL read models answer what the ledger answers."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import fields
from typing import Any
from uuid import UUID

from contextledger.application import Ledger
from contextledger.application.projections import TokenTotalsRecord
from contextledger.infrastructure.readmodels import SQLReadModels

#: Every field of a token_totals record that ``TokenTotals`` has too.
TOTALS_FIELDS = tuple(f.name for f in fields(TokenTotalsRecord) if f.name != "conversation_id")


def counters(record: TokenTotalsRecord | None) -> dict[str, Any]:
    assert record is not None
    return {name: getattr(record, name) for name in TOTALS_FIELDS}


def expected_counters(totals: Any) -> dict[str, Any]:
    return {name: getattr(totals, name) for name in TOTALS_FIELDS}


def assert_conversation_matches(models: SQLReadModels, ledger: Ledger, cid: UUID) -> None:
    """Transcript (marks included), summaries (validity included), totals and the
    listing row of ``cid`` equal the ledger's answers."""
    assert models.transcript.transcript(cid) == ledger.transcript(cid), cid
    assert models.summaries.summaries(cid) == ledger.summaries(cid), cid
    assert counters(models.token_totals.totals(cid)) == expected_counters(ledger.totals(cid)), cid
    conversation = ledger.conversation(cid)
    listed = {r.conversation_id: r for r in models.conversations.conversations()}[cid]
    totals = ledger.totals(cid)
    assert listed.last_version == conversation.version
    assert listed.messages == totals.messages
    assert listed.summaries == totals.summaries
    assert listed.key == totals.key
    origin = conversation.state.fork_of
    assert listed.forked_from == (origin.conversation_id if origin else None)
    assert listed.forked_at_version == (origin.version if origin else None)


def assert_read_models_equal_ledger(
    models: SQLReadModels, ledger: Ledger, ids: Iterable[UUID] | None = None
) -> None:
    """Every conversation (or those of ``ids``) and the global totals."""
    every = ledger.conversation_ids()
    assert [r.conversation_id for r in models.conversations.conversations()] == every
    for cid in every if ids is None else ids:
        assert_conversation_matches(models, ledger, cid)
    overall = models.token_totals.global_totals()
    assert overall.conversation_id is None
    assert counters(overall) == expected_counters(ledger.totals())


def catch_up_through_committed(runner: Any, timeout: float = 30.0) -> None:
    """``runner.catch_up()`` until the log is final through the highest id committed
    now. On PostgreSQL the final mark waits for every transaction that had an xid
    when a gap in the ids was seen (another session's, on the same server, included),
    so a catch-up can end below what the ledger itself already reads."""
    assert runner.wait_idle(timeout)
