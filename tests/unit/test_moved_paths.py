"""Modules moved into their rooms keep every path a topic may name: a ``module:Class``
topic through a module's old path (``PERSISTENCE_MODULE``, ``MAPPER_TOPIC`` or
``CIPHER_TOPIC`` kept in a deployment's environment, an adapter's topic) resolves to
the class its module holds now, and the module is loaded only when such a topic is
resolved. The domain's events and snapshots did not move (the golden log checks them)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from eventsourcing.utils import TopicError, resolve_topic

from contextledger.infrastructure.persistence.moved import MOVED, ROOMS, MovedModule, register_moved_paths

REPO = Path(__file__).resolve().parents[2]

#: The topics contextledger wrote into a store's settings before its modules moved.
KEPT_TOPICS = {
    "contextledger.infrastructure.stores:SQLiteStoreFactory": "persistence.stores",
    "contextledger.infrastructure.stores:ReadOnlySQLiteFactory": "persistence.stores",
    "contextledger.infrastructure.stores:ReadOnlyPostgresFactory": "persistence.stores",
    "contextledger.infrastructure.recorders:PostgresConversationFactory": "persistence.pgrecorder",
    "contextledger.infrastructure.recorders:MemoryFactory": "persistence.memory_recorder",
    "contextledger.infrastructure.pgstore:TimedPostgresFactory": "persistence.pgstore",
    "contextledger.infrastructure.mapper:PydanticMapper": "keys.mapper",
    "contextledger.infrastructure.mapper:JSONBytesTranscoder": "keys.mapper",
    "contextledger.infrastructure.subject_mapper:SubjectMapper": "keys.subject_mapper",
    "contextledger.infrastructure.aead:AESGCMCipher": "keys.aead",
    "contextledger.infrastructure.database:persistence_env": "persistence.database",
    "contextledger.infrastructure.estimates:counter_for_model": "counting.estimates",
    "contextledger.infrastructure.openai_summarizer:OpenAISummarizer": "summarizers.openai_summarizer",
    "contextledger.infrastructure.offline_summarizer:OfflineSummarizer": "summarizers.offline_summarizer",
    "contextledger.infrastructure.tracing:OpenTelemetryTracer": "tracing",
}


def _file(dotted: str) -> Path:
    return REPO / (dotted.removeprefix("contextledger.").replace(".", "/") + ".py")


def test_the_table_names_each_moved_module_where_it_is_now_and_not_where_it_was() -> None:
    assert len(MOVED) == sum(len(names) for rooms in ROOMS.values() for names in rooms.values())
    for old, new in MOVED.items():
        assert _file(new).is_file(), new
        assert not _file(old).exists(), old
        assert importlib.util.find_spec(new) is not None
    # No new path runs through an old one (a topic could otherwise mean two modules).
    for new in MOVED.values():
        parts = new.split(".")
        assert not {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & set(MOVED), new


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_name_of_a_moved_module_resolves_through_its_old_path(old: str) -> None:
    module = importlib.import_module(MOVED[old])
    assert module.__all__
    for name in module.__all__:
        assert resolve_topic(f"{old}:{name}") is getattr(module, name)


@pytest.mark.parametrize("topic", sorted(KEPT_TOPICS))
def test_the_topics_stores_were_configured_with_still_resolve(topic: str) -> None:
    module = importlib.import_module(f"contextledger.infrastructure.{KEPT_TOPICS[topic]}")
    assert resolve_topic(topic) is getattr(module, topic.partition(":")[2])


def test_a_name_the_moved_module_does_not_hold_is_a_topic_error() -> None:
    with pytest.raises(TopicError, match="NoSuchFactory"):
        resolve_topic("contextledger.infrastructure.recorders:NoSuchFactory")


def test_registering_again_changes_nothing() -> None:
    register_moved_paths()
    register_moved_paths()
    assert resolve_topic("contextledger.infrastructure.aead:AESGCMCipher").__name__ == "AESGCMCipher"
    moved = MovedModule("contextledger.infrastructure.aead", "contextledger.infrastructure.keys.aead")
    assert "moved to" in repr(moved)
    with pytest.raises(AttributeError):
        moved.__wrapped__  # noqa: B018 - a dunder is never looked up in the module


def test_a_fresh_process_resolves_old_topics_and_loads_a_module_only_when_asked() -> None:
    code = (
        "import json, sys\n"
        "import contextledger as cl\n"
        "cl.Ledger\n"
        "from eventsourcing.utils import resolve_topic\n"
        "gemini = 'contextledger.infrastructure.summarizers.gemini_summarizer'\n"
        "before = gemini in sys.modules\n"
        "found = resolve_topic('contextledger.infrastructure.gemini_summarizer:GeminiSummarizer')\n"
        "factory = resolve_topic('contextledger.infrastructure.stores:SQLiteStoreFactory')\n"
        "print(json.dumps([before, gemini in sys.modules, found.__module__, factory.__module__]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    before, after, found, factory = json.loads(done.stdout.strip().splitlines()[-1])
    assert (before, after) == (False, True)
    assert found == "contextledger.infrastructure.summarizers.gemini_summarizer"
    assert factory == "contextledger.infrastructure.persistence.stores"
