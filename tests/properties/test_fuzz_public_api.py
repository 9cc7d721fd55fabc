"""Junk into every public call: only the library's errors come out, and a failed call
leaves the store exactly as it was (same events, same notification ids).

The example count follows the hypothesis profile: ``ci`` (the default, bounded) or
``nightly`` (``pytest --hypothesis-profile=nightly tests/properties/test_fuzz_public_api.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl

# -- junk ---------------------------------------------------------------------------

JUNK_MESSAGES: list[Any] = [
    {"role": "user", "content": "ok \ud800"},
    {"role": "tool", "content": "result"},
    {"role": "tool", "tool_call_id": "call_nope", "content": "result"},
    {"role": "assistant", "content": None},
    {"role": "assistant", "tool_calls": []},
    {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}]},
    {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function",
                                          "function": {"name": "bad name!", "arguments": "{}"}}]},
    {"role": "user", "content": [{"type": "image_url"}]},
    {"role": "user", "content": [{"type": "text", "text": 5}]},
    {"role": "user", "content": "hi", "name": ""},
    {"role": "user", "content": "hi", "annotations": []},
    {"role": "system", "content": ["not", "parts"]},
    {"role": "user"},
    {"content": "no role"},
    {"role": "USER", "content": "hi"},
]

LONE_SURROGATES = st.sampled_from(["ok \ud800", "\udfff", "a\ud83d"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=2**63, max_value=2**200),
    st.integers(max_value=-1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=30),
    LONE_SURROGATES,
    st.just(""),
    st.just("x" * 300),
    st.binary(max_size=10),
    st.uuids(),
)
JUNK = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.text(max_size=8), inner, max_size=3),
        st.tuples(inner),
    ),
    max_leaves=6,
)


def junk_message() -> st.SearchStrategy[Any]:
    """Messages that are almost right, or not at all."""
    return st.one_of(
        JUNK,
        st.sampled_from(JUNK_MESSAGES),
        st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "tool", "system"]),
                               "content": JUNK}),
        st.fixed_dictionaries({"role": JUNK, "content": st.text(max_size=10)}),
    )


# -- the store, counted ---------------------------------------------------------------


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cl.Ledger]:
    path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
    with cl.Ledger.open(f"sqlite:///{path}", run_policy=False) as ledger:
        yield ledger


def fingerprint(ledger: cl.Ledger) -> tuple[int, int]:
    """The log's size and its newest notification id."""
    recorder = ledger.recorder
    top = recorder.max_notification_id() or 0
    count = sum(len(page) for page in [recorder.select_notifications(1, 10_000)])
    return count, top


def call_with_junk(ledger: cl.Ledger, call: Callable[[], Any]) -> None:
    before = fingerprint(ledger)
    try:
        call()
    except cl.ContextLedgerError as exc:
        assert str(exc)  # a message, always
        assert fingerprint(ledger) == before, f"a failed call wrote to the store: {exc!r}"
    # Anything else propagates and fails the test, naming the raw exception.


def existing(ledger: cl.Ledger) -> UUID:
    cid = ledger.start("You are fuzzed.", model="gpt-4o-mini")
    ledger.append(cid, {"role": "user", "content": "hello"})
    return cid


CONVERSATION = st.one_of(JUNK, st.builds(uuid4))
FUZZ = settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                     HealthCheck.too_slow])


@FUZZ
@given(system_prompt=JUNK, model=JUNK, policy=JUNK, conversation_id=JUNK)
def test_start_with_junk(ledger: cl.Ledger, system_prompt: Any, model: Any, policy: Any,
                         conversation_id: Any) -> None:
    call_with_junk(ledger, lambda: ledger.start(system_prompt, model=model, policy=policy,
                                                conversation_id=conversation_id))


@FUZZ
@given(message=junk_message(), client_message_id=st.one_of(st.none(), JUNK))
def test_append_with_junk(ledger: cl.Ledger, message: Any, client_message_id: Any) -> None:
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.append(cid, message, client_message_id=client_message_id))


@FUZZ
@given(messages=st.one_of(JUNK, st.lists(junk_message(), max_size=3)))
def test_extend_with_junk(ledger: cl.Ledger, messages: Any) -> None:
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.extend(cid, messages))


@FUZZ
@given(conversation_id=CONVERSATION, version=st.one_of(st.none(), JUNK))
def test_queries_with_junk(ledger: cl.Ledger, conversation_id: Any, version: Any) -> None:
    for query in (
        lambda: ledger.pop(conversation_id),
        lambda: ledger.clear(conversation_id),
        lambda: ledger.tools(conversation_id),
        lambda: ledger.context_items(conversation_id, version=version),
        lambda: ledger.context(conversation_id, version=version),
        lambda: ledger.working_memory(conversation_id, version=version),
        lambda: ledger.conversation(conversation_id, version=version),
        lambda: ledger.totals(conversation_id),
        lambda: ledger.transcript(conversation_id),
        lambda: ledger.summaries(conversation_id),
        lambda: list(ledger.replay(conversation_id)),
        lambda: ledger.verify(conversation_id),
        lambda: ledger.pending_summary(conversation_id),
    ):
        call_with_junk(ledger, query)


@FUZZ
@given(position=JUNK, message=junk_message(), reason=JUNK, text=JUNK, version=JUNK, key=JUNK)
def test_edits_with_junk(ledger: cl.Ledger, position: Any, message: Any, reason: Any, text: Any,
                         version: Any, key: Any) -> None:
    cid = existing(ledger)
    for edit in (
        lambda: ledger.retract(cid, position, reason=reason),
        lambda: ledger.edit(cid, position, message),
        lambda: ledger.rewind(cid, position),
        lambda: ledger.change_system_prompt(cid, text),
        lambda: ledger.fork(cid, version=version, key=key),
        lambda: ledger.close_open_tool_calls(cid, content=text),
    ):
        call_with_junk(ledger, edit)


@FUZZ
@given(key=JUNK, tools=JUNK, items=JUNK)
def test_keys_tools_and_items_with_junk(ledger: cl.Ledger, key: Any, tools: Any, items: Any) -> None:
    call_with_junk(ledger, lambda: ledger.get_or_start(key))
    call_with_junk(ledger, lambda: ledger.start("s", key=key, tools=tools))
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.change_tools(cid, tools))
    call_with_junk(ledger, lambda: ledger.append_items(cid, items))


@FUZZ
@given(conversation_id=CONVERSATION, message=junk_message())
def test_the_async_twin_with_junk(ledger: cl.Ledger, conversation_id: Any, message: Any) -> None:
    import asyncio

    twin = cl.AsyncLedger(ledger)

    async def calls() -> None:
        for call in (lambda: twin.append(conversation_id, message), lambda: twin.context(conversation_id),
                     lambda: twin.pop(conversation_id)):
            before = fingerprint(ledger)
            try:
                await call()
            except cl.ContextLedgerError:
                assert fingerprint(ledger) == before

    try:
        asyncio.run(calls())
    finally:
        twin._executor.shutdown(wait=True)  # the shared ledger stays open for the next example


@FUZZ
@given(version=JUNK)
def test_a_junk_version_of_a_real_conversation(ledger: cl.Ledger, version: Any) -> None:
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.context(cid, version=version))


@FUZZ
@given(prompt_tokens=JUNK, completion_tokens=JUNK)
def test_record_usage_with_junk(ledger: cl.Ledger, prompt_tokens: Any, completion_tokens: Any) -> None:
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.record_usage(cid, prompt_tokens=prompt_tokens,
                                                       completion_tokens=completion_tokens))


@FUZZ
@given(policy=JUNK)
def test_change_policy_with_junk(ledger: cl.Ledger, policy: Any) -> None:
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.change_policy(cid, policy))


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["trigger_messages", "keep_messages", "trigger_tokens",
                                               "keep_tokens", "summary_mode", "keep_tool_results",
                                               "max_context_tokens", "max_summary_tokens",
                                               "summarizer_model", "layered_max_tokens", "bogus"]),
                              JUNK, max_size=4))
def test_policies_with_junk(fields: dict[str, Any]) -> None:
    try:
        cl.ReductionPolicy(**fields)
    except cl.ContextLedgerError as exc:
        assert str(exc)


@FUZZ
@given(fields=st.dictionaries(st.sampled_from(["database_url", "summarizer_model", "summarizer_timeout",
                                               "max_concurrent_summaries", "poll_interval",
                                               "snapshot_interval", "cipher_key", "bogus"]),
                              JUNK, max_size=3))
def test_settings_with_junk(fields: dict[str, Any]) -> None:
    try:
        cl.Settings.from_env({}, **fields)
    except cl.ContextLedgerError as exc:
        assert str(exc)


@FUZZ
@given(message=junk_message())
def test_messages_with_junk(message: Any) -> None:
    try:
        cl.Message.from_openai(message)
    except cl.ContextLedgerError as exc:
        assert str(exc)


@FUZZ
@given(url=st.one_of(JUNK, st.sampled_from(["sqlite://", "mysql://x/y", "postgresql://", "memory:",
                                            "sqlite:////no/such/folder/x.db", "postgresql://u:p@h:99999/db"])))
def test_open_with_junk_urls(url: Any, tmp_path_factory: pytest.TempPathFactory) -> None:
    try:
        cl.Ledger.open(url, run_policy=False).close()
    except cl.ContextLedgerError as exc:
        assert "p@" not in str(exc)  # a password never shows


@FUZZ
@given(argv=st.lists(st.one_of(st.text(max_size=12), st.sampled_from(
    ["demo", "context", "transcript", "replay", "stats", "export", "verify", "rebuild", "worker",
     "--database", "--json", "--version", "-h", "--shard", "1/0", "--messages", "-5"])), max_size=5))
def test_cli_argument_parsing_with_junk(argv: list[str], tmp_path_factory: pytest.TempPathFactory,
                                        capsys: pytest.CaptureFixture[str],
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from contextledger.infrastructure.cli import main

    folder = tmp_path_factory.mktemp("cli")
    monkeypatch.chdir(folder)
    if "demo" in argv or "worker" in argv:
        return  # long-running commands are tried by their own tests
    code = main([*argv, "--database", f"sqlite:///{Path(folder) / 'absent.db'}"])
    assert code in (0, 1, 2)
