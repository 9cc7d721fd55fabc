"""The paths the domain's modules had before they moved into its rooms.

The stored events and snapshots name their classes by pinned topics (``TOPIC``), and
the modules a stored log names by path (``events``, ``conversation``, ``client_ids``,
``placement``, ``erasure``) did not move. A ``module:Class`` topic through an old path
of a moved module (``ReductionPolicy`` through the ``policy`` module's path before it
moved into ``values``) still resolves, and this table is spelt so that no rewrite of
old paths matches it: ``register_moved_paths`` registers each old path with eventsourcing
(``register_topic``), standing for the module where it is now, which is imported only
when a topic through it is resolved. ``events`` registers them with the events, so a
process that reads a log has them whatever else it loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from importlib import import_module
from types import ModuleType
from typing import Any

from eventsourcing.utils import register_topic

__all__ = ["MOVED", "ROOMS", "MovedModule", "register_moved_paths", "register_paths"]

#: The modules that moved, under the room each one moved into (the module
#: ``contextledger.domain.<name>`` is now ``contextledger.domain.<room>.<name>``).
ROOMS: dict[str, tuple[str, ...]] = {
    "commands": ("editing", "edits", "summarizing"),
    "folding": ("aggregate", "fold", "state", "sums", "queries", "budget", "thresholds"),
    "values": (
        "errors",
        "validation",
        "messages",
        "items",
        "tools",
        "digests",
        "redaction",
        "windows",
        "policy",
        "reduction",
    ),
}

#: Old dotted module path -> the module's path now (one entry per module moved).
MOVED: dict[str, str] = {
    f"contextledger.domain.{name}": f"contextledger.domain.{room}.{name}"
    for room, names in ROOMS.items()
    for name in names
}


class MovedModule(ModuleType):
    """A module under the path it had: reading an attribute imports the module where
    it is now and returns that module's attribute."""

    def __init__(self, old: str, new: str) -> None:
        super().__init__(old)
        self.moved_to = new

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(import_module(self.moved_to), name)

    def __repr__(self) -> str:
        return f"<module {self.__name__!r}, moved to {self.moved_to!r}>"


_lock = threading.Lock()
_registered: dict[str, MovedModule] = {}


def register_paths(moved: Mapping[str, str]) -> None:
    """Register each old module path of ``moved`` (old -> now) with eventsourcing, once:
    the domain's here, the other layers' from their own tables."""
    with _lock:
        for old, new in moved.items():
            if old not in _registered:
                _registered[old] = MovedModule(old, new)
                register_topic(old, _registered[old])


def register_moved_paths() -> None:
    """Register every old module path of ``MOVED`` with eventsourcing (once)."""
    register_paths(MOVED)
