"""The domain's modules moved into its rooms keep every path a topic may name: a
``module:Class`` topic through a moved module's old path resolves to the class its
module holds now, in any process that has the events (no other layer loaded), and the
module is loaded only when such a topic is resolved. The modules stored logs name by
path did not move (test_topics.py pins their classes)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from eventsourcing.utils import TopicError, resolve_topic

from contextledger.domain.moved import MOVED, ROOMS, register_moved_paths

PACKAGE = Path(__file__).resolve().parents[2] / "src"


def _file(dotted: str) -> Path:
    return PACKAGE / (dotted.replace(".", "/") + ".py")


def test_the_table_names_each_moved_module_where_it_is_now_and_not_where_it_was() -> None:
    assert len(MOVED) == sum(len(names) for names in ROOMS.values()) == 20
    for old, new in MOVED.items():
        assert _file(new).is_file(), new
        assert not _file(old).exists(), old
        assert importlib.util.find_spec(new) is not None
    for new in MOVED.values():
        parts = new.split(".")
        assert not {".".join(parts[:i]) for i in range(2, len(parts) + 1)} & set(MOVED), new


def test_every_room_of_the_domain_is_in_the_table() -> None:
    rooms = {path.parent.name for path in (PACKAGE / "contextledger" / "domain").glob("*/__init__.py")}
    assert rooms == set(ROOMS)


@pytest.mark.parametrize("old", sorted(MOVED))
def test_every_name_of_a_moved_module_resolves_through_its_old_path(old: str) -> None:
    importlib.import_module("contextledger.domain.events")
    module = importlib.import_module(MOVED[old])
    assert module.__all__
    for name in module.__all__:
        assert resolve_topic(f"{old}:{name}") is getattr(module, name)


def test_a_name_the_moved_module_does_not_hold_is_a_topic_error() -> None:
    importlib.import_module("contextledger.domain.events")
    with pytest.raises(TopicError, match="NoSuchPolicy"):
        resolve_topic("contextledger.domain.policy:NoSuchPolicy")


def test_registering_again_changes_nothing() -> None:
    register_moved_paths()
    register_moved_paths()
    assert resolve_topic("contextledger.domain.policy:ReductionPolicy").__name__ == "ReductionPolicy"


def test_a_process_with_only_the_events_resolves_old_paths_and_loads_a_module_when_asked() -> None:
    code = (
        "import json, sys\n"
        "import contextledger.domain.events\n"
        "from eventsourcing.utils import resolve_topic\n"
        "windows = 'contextledger.domain.values.windows'\n"
        "before = windows in sys.modules\n"
        "found = resolve_topic('contextledger.domain.windows:context_window')\n"
        "layers = sorted({m.split('.')[1] for m in sys.modules if m.startswith('contextledger.')})\n"
        "print(json.dumps([before, windows in sys.modules, found.__module__, layers]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    before, after, found, layers = json.loads(done.stdout.strip().splitlines()[-1])
    assert (before, after, found) == (False, True, "contextledger.domain.values.windows")
    assert layers == ["_lazy", "domain"]
