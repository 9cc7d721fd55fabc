"""Edits keep every context valid and free of retracted text, on every store."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from contextledger.application import Ledger
from tests.support.edit_machine import EditMachine

EXAMPLES = {"memory": 40, "sqlite": 25, "postgres": 15}


def test_any_sequence_of_edits_and_summaries_keeps_the_invariants(store_url: str) -> None:
    kind = store_url.split(":", 1)[0].replace("postgresql", "postgres")
    with Ledger.open(store_url, run_policy=False) as ledger:

        class Machine(EditMachine):
            pass

        Machine.ledger = ledger
        run_state_machine_as_test(
            Machine,
            settings=settings(
                max_examples=EXAMPLES[kind],
                stateful_step_count=30,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            ),
        )
        assert ledger.verify().ok
