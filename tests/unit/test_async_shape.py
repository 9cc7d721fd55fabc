"""The AsyncLedger is the Ledger's twin: the same methods, the same parameters, awaited."""

from __future__ import annotations

import inspect

import pytest

import contextledger as cl

TWINNED = [
    "start", "get_or_start", "append", "extend", "change_policy", "change_tools", "record_usage",
    "record_summary", "context", "tools", "working_memory", "totals", "transcript", "summaries",
    "pending_summary", "replay", "conversation_ids", "verify", "wait_idle",
]


@pytest.mark.parametrize("name", TWINNED)
def test_each_ledger_method_has_an_async_twin_with_the_same_parameters(name: str) -> None:
    sync_method = getattr(cl.Ledger, name)
    async_method = getattr(cl.AsyncLedger, name)
    assert inspect.iscoroutinefunction(async_method)
    assert list(inspect.signature(async_method).parameters) == list(inspect.signature(sync_method).parameters)


def test_the_async_ledger_and_the_new_names_are_in_the_flat_namespace() -> None:
    for name in ("AsyncLedger", "ConversationRef", "ContextMessage", "ToolDefinition", "KEY_NAMESPACE"):
        assert name in cl.__all__
        assert getattr(cl, name) is not None
