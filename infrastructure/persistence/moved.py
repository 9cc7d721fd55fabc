"""The paths modules had before they moved into their rooms, and where they are now.

A topic (``module:Class``) names a class by the module that defines it, and such
topics are kept: eventsourcing's ``PERSISTENCE_MODULE``, ``MAPPER_TOPIC`` and
``CIPHER_TOPIC`` may sit in a deployment's environment, and a stored log names its
events and snapshots by topic (those are the domain's, pinned, and did not move).
``register_moved_paths`` registers each old module path with eventsourcing
(``register_topic``), standing for the module where it is now, so an old topic
resolves to the class its module holds now; the module is imported only when a topic
through it is resolved. The package's ``__init__`` registers them, so any store opened
(or any module of this room imported) has them.
"""

from __future__ import annotations

from contextledger.domain.moved import MovedModule, register_paths

__all__ = ["MOVED", "ROOMS", "MovedModule", "register_moved_paths"]

#: The modules that moved: under each package, the room each one moved into (the module
#: ``contextledger.<package>.<name>`` is now ``contextledger.<package>.<room>.<name>``).
ROOMS: dict[str, dict[str, tuple[str, ...]]] = {
    "application": {
        "facade": (
            "ledger",
            "opening",
            "background",
            "lifecycle",
            "read_only",
            "async_ledger",
            "session_items",
        ),
        "writing": ("commands", "ledger_edits", "idempotency", "inbound"),
        "reading": ("queries", "ledger_reads"),
        "privacy": ("subjects", "erasure", "retention", "ledger_privacy"),
        "auditing": ("audit", "integrity", "whatif", "whatif_candidate", "whatif_results"),
        "summaries": ("summary_service", "summary_attempts", "summarization", "history"),
        "formats": ("items", "originals"),
        "following": ("follower", "notifications"),
        "storage": ("store", "store_failures", "outage", "remainders", "saving", "sharding"),
        "shared": (
            "ports",
            "settings",
            "wire",
            "results",
            "counting",
            "limits",
            "observability",
            "addressing",
        ),
    },
    "infrastructure": {
        "persistence": (
            "database",
            "stores",
            "sqlite_files",
            "pgstore",
            "recorders",
            "pgrecorder",
            "group_commit",
            "pgreads",
            "sqlite_recorder",
            "memory_recorder",
            "dbapi_errors",
        ),
        "keys": (
            "subject_keys",
            "subject_mapper",
            "key_tables",
            "aead",
            "erasure_store",
            "lineage",
            "mapper",
        ),
        "summarizers": (
            "summary_prompt",
            "summarizer_base",
            "openai_summarizer",
            "anthropic_summarizer",
            "gemini_summarizer",
            "offline_summarizer",
        ),
        "counting": ("tokens", "estimates", "anthropic_counter", "encodings"),
    },
    "infrastructure.cli": {
        "commands": (
            "init",
            "conversations",
            "audit",
            "stats",
            "whatif",
            "rebuild",
            "worker",
            "erase",
            "keys",
            "demo",
            "serve",
        ),
    },
}

#: Old dotted module path -> the module's path now (one entry per module moved).
MOVED: dict[str, str] = {
    f"contextledger.{package}.{name}": f"contextledger.{package}.{room}.{name}"
    for package, rooms in ROOMS.items()
    for room, names in rooms.items()
    for name in names
}


def register_moved_paths() -> None:
    """Register every old module path of ``MOVED`` with eventsourcing (once), as the
    domain registers its own (``domain.moved``)."""
    register_paths(MOVED)
