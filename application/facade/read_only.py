"""A ledger opened read-only (``Ledger.open(url, read_only=True)``).

Such a ledger creates nothing in its store (its persistence is configured with
``CREATE_TABLE`` off, and a missing schema or table is ``SchemaMissingError``), runs no
summarization policy and attaches no follower (followers write tracking rows), and
refuses every call that would write, before it reads or checks anything, with
``ReadOnlyError``. Underneath, the store itself refuses writes too: a SQLite file is
opened with ``mode=ro`` and a PostgreSQL session has ``default_transaction_read_only``.

``WRITING`` names the ledger's calls that write (or start something that writes) and
``READING`` those that do not; a test checks that every public method of ``Ledger``
is in one of them, so a new command cannot slip past the refusal.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from contextledger.domain.values.errors import ConfigurationError, ReadOnlyError

__all__ = ["READING", "WRITING", "read_only_updates", "refuse_writes"]

#: The ledger's calls that write to the store, or start a follower that does.
WRITING = frozenset(
    {
        "append",
        "append_items",
        "attach",
        "change_policy",
        "change_system_prompt",
        "change_tools",
        "clear",
        "close_open_tool_calls",
        "edit",
        "erase",
        "extend",
        "fork",
        "get_or_start",
        "pop",
        "record_summary",
        "record_summary_failure",
        "record_usage",
        "retract",
        "rewind",
        "save",
        "save_conversations",
        "start",
        "start_policy",
        "take_snapshot",
    }
)

#: The ledger's calls that only read (or only change this process's own state).
READING = frozenset(
    {
        "add_event_listener",
        "add_listener",
        "check_receipt",
        "close",
        "construct_env",
        "construct_event_store",
        "construct_factory",
        "construct_mapper",
        "construct_notification_log",
        "construct_recorder",
        "construct_repository",
        "construct_snapshot_store",
        "construct_transcoder",
        "context",
        "context_items",
        "conversation",
        "conversation_ids",
        "counter_for",
        "export_subject",
        "fallback_summarizer",
        "idle_conversations",
        "is_snapshotting_enabled",
        "notify",
        "open",
        "pending_summary",
        "register_transcodings",
        "replay",
        "simulate",
        "subject_of",
        "summaries",
        "summarizer",
        "summarizer_model_name",
        "tools",
        "totals",
        "transcript",
        "transcript_items",
        "verify",
        "wait_idle",
        "working_memory",
    }
)


def _refusal(operation: str, where: str) -> Callable[..., NoReturn]:
    def refuse(*_args: Any, **_kwargs: Any) -> NoReturn:
        raise ReadOnlyError(
            f"{operation}() writes, and the ledger on {where} is open read-only: "
            "open it without read_only=True to write",
            operation=operation,
        )

    refuse.__name__ = operation
    return refuse


def refuse_writes(ledger: Any, where: str) -> None:
    """Make every call of ``WRITING`` on ``ledger`` raise ``ReadOnlyError`` naming it
    (``where``: the store, password masked), before it checks or reads anything."""
    for operation in WRITING:
        setattr(ledger, operation, _refusal(operation, where))


def read_only_updates(read_only: bool, run_policy: bool | None) -> dict[str, Any]:
    """The settings ``Ledger.open(read_only=...)`` changes: a read-only ledger runs
    no policy (asking for both is a ``ConfigurationError``)."""
    if not read_only:
        return {"read_only": False}
    if run_policy:
        raise ConfigurationError(
            "a read-only ledger runs no summarization policy: drop run_policy=True",
            setting="run_policy",
        )
    return {"read_only": True, "run_policy": False}
