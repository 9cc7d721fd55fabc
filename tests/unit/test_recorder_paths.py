"""The class paths that name a store's factory keep resolving: eventsourcing finds the
factory by the ``PERSISTENCE_MODULE`` setting (``module:Class``), which may be kept in
a deployment's environment, so every path ``contextledger.infrastructure.recorders``
ever offered resolves to the class its defining module holds now."""

from __future__ import annotations

from pathlib import Path

import pytest
from eventsourcing.utils import resolve_topic

from contextledger.application.shared.settings import Settings
from contextledger.infrastructure.persistence import (
    group_commit,
    memory_recorder,
    pgrecorder,
    pgstore,
    recorders,
)
from contextledger.infrastructure.persistence import sqlite_recorder as sqlite_module
from contextledger.infrastructure.persistence.database import persistence_env

#: Every name the recorders module offered, with where it is defined.
HOMES = {
    "GroupCommit": group_commit,
    "MAX_BATCH_EVENTS": group_commit,
    "MemoryFactory": memory_recorder,
    "PollingSubscription": pgrecorder,
    "PostgresConversationFactory": pgrecorder,
    "PostgresConversationRecorder": pgrecorder,
    "PostgresSnapshotRecorder": pgstore,
    "SQLiteConversationFactory": sqlite_module,
    "SQLiteConversationRecorder": sqlite_module,
    "WindowedPOPORecorder": memory_recorder,
}


@pytest.mark.parametrize("name", sorted(HOMES))
def test_a_path_through_the_recorders_module_resolves_to_the_defining_class(name: str) -> None:
    assert resolve_topic(f"contextledger.infrastructure.recorders:{name}") is getattr(HOMES[name], name)


def test_the_recorders_module_names_everything_it_offered() -> None:
    assert sorted(recorders.__all__) == sorted(HOMES)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("memory://", memory_recorder.MemoryFactory),
        ("postgresql://postgres@127.0.0.1:5432/postgres", pgrecorder.PostgresConversationFactory),
    ],
)
def test_the_store_settings_name_a_factory_that_resolves(url: str, expected: type) -> None:
    topic = persistence_env(Settings(database_url=url))["PERSISTENCE_MODULE"]
    assert resolve_topic(topic) is expected


def test_the_sqlite_store_factory_extends_the_sqlite_recorder_factory(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'events.db'}")
    topic = persistence_env(settings)["PERSISTENCE_MODULE"]
    factory = resolve_topic(topic)
    assert issubclass(factory, sqlite_module.SQLiteConversationFactory)
    assert factory.application_recorder_class is sqlite_module.SQLiteConversationRecorder
