"""Edits keep every context valid and free of retracted text, on every store; the
SQL read models, followed live and rebuilt, answer what the ledger answers."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test
from sqlalchemy import select

from contextledger.application import Ledger
from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels
from tests.support.edit_machine import EditMachine
from tests.support.readmodel_checks import assert_read_models_equal_ledger, catch_up_through_committed

EXAMPLES = {"memory": 40, "sqlite": 25, "postgres": 15}


def rows(models: SQLReadModels, name: str) -> list[tuple[Any, ...]]:
    with models.read() as conn:
        return sorted((tuple(r) for r in conn.execute(select(models.tables[name]))), key=repr)


def test_any_sequence_of_edits_and_summaries_keeps_the_invariants(store_url: str) -> None:
    kind = store_url.split(":", 1)[0].replace("postgresql", "postgres")
    with Ledger.open(store_url, run_policy=False) as ledger:
        models = SQLReadModels.for_ledger(ledger)
        runner = models.runner(ledger, close_with_runner=False)

        class Machine(EditMachine):
            pass

        Machine.ledger = ledger
        Machine.read_models = models
        Machine.runner = runner
        try:
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
            catch_up_through_committed(runner)
            assert_read_models_equal_ledger(models, ledger)
            live = {name: rows(models, name) for name in READ_MODEL_NAMES}
            for name in READ_MODEL_NAMES:
                runner.rebuild(name)
                assert rows(models, name) == live[name], name
        finally:
            models.close()
