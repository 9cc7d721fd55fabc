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
from eventsourcing.popo import POPOApplicationRecorder
from eventsourcing.postgres import PostgresApplicationRecorder
from eventsourcing.sqlite import SQLiteApplicationRecorder
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

import contextledger as cl

# -- junk ---------------------------------------------------------------------------

JUNK_MESSAGES: list[Any] = [
    {"role": "user", "content": "ok \ud800"},
    {"role": "tool", "content": "result"},
    {"role": "tool", "tool_call_id": "call_nope", "content": "result"},
    {"role": "assistant", "content": None},
    {"role": "assistant", "tool_calls": []},
    {"role": "assistant", "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f"}}]},
    {
        "role": "assistant",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "bad name!", "arguments": "{}"}}
        ],
    },
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
        st.fixed_dictionaries(
            {"role": st.sampled_from(["user", "assistant", "tool", "system"]), "content": JUNK}
        ),
        st.fixed_dictionaries({"role": JUNK, "content": st.text(max_size=10)}),
    )


# -- the store, counted ---------------------------------------------------------------


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[cl.Ledger]:
    """One ledger per store for the whole module (each example adds conversations)."""
    if request.param == "memory":
        with cl.Ledger.open("memory://", run_policy=False) as ledger:
            yield ledger
    elif request.param == "sqlite":
        path = tmp_path_factory.mktemp("fuzz") / "fuzz.db"
        with cl.Ledger.open(f"sqlite:///{path}", run_policy=False) as ledger:
            yield ledger
    else:
        from tests.conftest import POSTGRES_URL, _postgres_admin

        admin: Any = _postgres_admin()
        schema = f"fuzz_{uuid4().hex[:12]}"
        admin.execute(f'CREATE SCHEMA "{schema}"')
        try:
            with cl.Ledger.open(f"{POSTGRES_URL.split('?')[0]}?schema={schema}", run_policy=False) as ledger:
                yield ledger
        finally:
            admin.execute(f'DROP SCHEMA "{schema}" CASCADE')
            admin.close()


def fingerprint(ledger: cl.Ledger) -> tuple[int, int]:
    """The log's size and its newest committed notification id (on PostgreSQL,
    ``max_notification_id`` is the final horizon, which may still move up to writes
    committed before the call)."""
    recorder = ledger.recorder
    if isinstance(recorder, PostgresApplicationRecorder):
        # The same two numbers in one statement, counted by the server: the listing
        # below is three round trips and carries every row of the log to count them.
        statement = SQL(
            "SELECT count(*) AS count, coalesce(max(notification_id), 0) AS top FROM {}.{}"
        ).format(Identifier(recorder.datastore.schema), Identifier(recorder.events_table_name))
        with recorder.datastore.get_connection() as conn:
            row = conn.execute(statement).fetchone()
        return int(row["count"]), int(row["top"])
    if isinstance(recorder, SQLiteApplicationRecorder):  # the same in one statement
        with recorder.datastore.transaction(commit=False) as cursor:
            cursor.execute(f"SELECT count(*), coalesce(max(rowid), 0) FROM {recorder.events_table_name}")
            count, top = cursor.fetchone()
        return int(count), int(top)
    # The in-memory recorder: its list of stored events, counted without listing them
    # (a listing builds a notification per event, on every call of every example).
    assert isinstance(recorder, POPOApplicationRecorder)
    top = getattr(recorder, "max_committed_notification_id", recorder.max_notification_id)() or 0
    with recorder._database_lock:
        count = len(recorder._stored_events)
    return count, top


def call_with_junk(ledger: cl.Ledger, call: Callable[[], Any]) -> None:
    before = fingerprint(ledger)
    try:
        call()
    except cl.ContextLedgerError as exc:
        assert str(exc)  # a message, always
        assert fingerprint(ledger) == before, f"a failed call wrote to the store: {exc!r}"
    # Anything else propagates and fails the test, naming the raw exception.


def existing(ledger: cl.Ledger, *, key: str | None = None) -> UUID:
    cid = ledger.start("You are fuzzed.", model="gpt-4o-mini", key=key)
    ledger.append(cid, {"role": "user", "content": "hello"})
    return cid


def with_tools(ledger: cl.Ledger) -> UUID:
    """A conversation with a summary-free history of every shape an edit meets: a
    plain exchange, a whole tool-call group, and an open call at the end."""
    cid = existing(ledger)
    ledger.append(cid, {"role": "assistant", "content": "hi"})
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": [call]})
    ledger.append(cid, {"role": "tool", "tool_call_id": "c1", "content": "done"})
    ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": [{**call, "id": "c2"}]})
    return cid


CONVERSATION = st.one_of(JUNK, st.builds(uuid4))
FUZZ = settings(
    deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)
#: For the tests that make a dozen calls per example on each of the three stores: a
#: third of the profile's examples (20 in "ci").
HEAVY = settings(FUZZ, max_examples=max(10, settings().max_examples // 3))


@FUZZ
@given(system_prompt=JUNK, model=JUNK, policy=JUNK, conversation_id=JUNK)
def test_start_with_junk(
    ledger: cl.Ledger, system_prompt: Any, model: Any, policy: Any, conversation_id: Any
) -> None:
    call_with_junk(
        ledger,
        lambda: ledger.start(system_prompt, model=model, policy=policy, conversation_id=conversation_id),
    )


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
def test_edits_with_junk(
    ledger: cl.Ledger, position: Any, message: Any, reason: Any, text: Any, version: Any, key: Any
) -> None:
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


#: Positions that exist in ``with_tools`` conversations, and some that do not.
POSITIONS = st.one_of(st.integers(min_value=-2, max_value=6), JUNK)
#: Strings a key may be: junk text, lone surrogates, UUID-like, too long, NUL.
KEYS = st.one_of(
    LONE_SURROGATES,
    JUNK,
    st.text(max_size=12),
    st.sampled_from(["k\ud800", "\udc00", "a\x00b", "x" * 201, "", " ", str(uuid4()), uuid4().hex]),
)


@HEAVY
@given(position=POSITIONS, reason=st.one_of(LONE_SURROGATES, JUNK), message=junk_message())
def test_edits_of_real_positions_with_junk(
    ledger: cl.Ledger, position: Any, reason: Any, message: Any
) -> None:
    """Every argument of retract, edit and rewind, on positions that exist (so the
    arguments after the position are reached), and pop and clear."""
    cid = with_tools(ledger)
    for edit in (
        lambda: ledger.retract(cid, position, reason=reason),
        lambda: ledger.retract(cid, 0, reason=reason),
        lambda: ledger.edit(cid, position, message),
        lambda: ledger.edit(cid, 0, message),
        lambda: ledger.edit(cid, 1, message),
        lambda: ledger.rewind(cid, position),
    ):
        call_with_junk(ledger, edit)
    call_with_junk(ledger, lambda: ledger.context_items(cid, summary_role=reason))
    call_with_junk(ledger, lambda: ledger.change_system_prompt(cid, reason))
    call_with_junk(ledger, lambda: ledger.close_open_tool_calls(cid, content=reason))
    for edit in (lambda: ledger.pop(cid), lambda: ledger.clear(cid), lambda: ledger.pop(cid)):
        try:
            edit()
        except cl.ContextLedgerError as exc:
            assert str(exc)


@HEAVY
@given(version=st.one_of(st.none(), st.integers(min_value=-1, max_value=8), JUNK), key=KEYS)
def test_fork_with_junk(ledger: cl.Ledger, version: Any, key: Any) -> None:
    cid = with_tools(ledger)
    ledger.retract(cid, 1, reason="fuzz")
    call_with_junk(ledger, lambda: ledger.fork(cid, version=version, key=key))
    call_with_junk(ledger, lambda: ledger.fork(cid, version, key))


@HEAVY
@given(
    key=KEYS,
    system_prompt=st.one_of(LONE_SURROGATES, JUNK),
    model=st.one_of(LONE_SURROGATES, JUNK),
    policy=JUNK,
    tools=JUNK,
    conversation_id=JUNK,
)
def test_start_and_get_or_start_with_junk_keys(
    ledger: cl.Ledger, key: Any, system_prompt: Any, model: Any, policy: Any, tools: Any, conversation_id: Any
) -> None:
    call_with_junk(ledger, lambda: ledger.start(system_prompt, key=key))
    call_with_junk(ledger, lambda: ledger.start("s", key=key, conversation_id=conversation_id))
    call_with_junk(ledger, lambda: ledger.start("s", key=key, model=model, policy=policy, tools=tools))
    call_with_junk(ledger, lambda: ledger.get_or_start(key))
    call_with_junk(ledger, lambda: ledger.get_or_start(key, system_prompt=system_prompt, model=model))
    call_with_junk(ledger, lambda: ledger.get_or_start(key, policy=policy, tools=tools))
    call_with_junk(
        ledger,
        lambda: ledger.get_or_start(
            f"fuzz-{uuid4().hex}", system_prompt=system_prompt, model=model, policy=policy, tools=tools
        ),
    )


@HEAVY
@given(key=KEYS, message=junk_message(), position=POSITIONS, reason=st.one_of(LONE_SURROGATES, JUNK))
def test_key_addressing_with_junk(
    ledger: cl.Ledger, key: Any, message: Any, position: Any, reason: Any
) -> None:
    """Every call that names a conversation, given a junk key (or one of no conversation)."""
    real = f"fuzz-{uuid4().hex}"
    existing(ledger, key=real)
    for ref in (key, real):
        for call in addressed_calls(ledger, ref, key, message, position, reason):
            call_with_junk(ledger, call)


def addressed_calls(
    ledger: cl.Ledger, ref: Any, key: Any, message: Any, position: Any, reason: Any
) -> list[Callable[[], Any]]:
    return [
        lambda: ledger.append(ref, message),
        lambda: ledger.extend(ref, [message]),
        lambda: ledger.context(ref),
        lambda: ledger.working_memory(ref),
        lambda: ledger.totals(ref),
        lambda: ledger.transcript(ref),
        lambda: ledger.retract(ref, position, reason=reason),
        lambda: ledger.edit(ref, position, message),
        lambda: ledger.rewind(ref, position),
        lambda: ledger.fork(ref, key=key),
        lambda: ledger.pop(ref),
        lambda: ledger.clear(ref),
    ]


@FUZZ
@given(key=JUNK, tools=JUNK, items=JUNK)
def test_keys_tools_and_items_with_junk(ledger: cl.Ledger, key: Any, tools: Any, items: Any) -> None:
    call_with_junk(ledger, lambda: ledger.get_or_start(key))
    call_with_junk(ledger, lambda: ledger.start("s", key=key, tools=tools))
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.change_tools(cid, tools))
    call_with_junk(ledger, lambda: ledger.append_items(cid, items))


@HEAVY
@given(conversation_id=CONVERSATION, message=junk_message())
def test_the_async_twin_with_junk(ledger: cl.Ledger, conversation_id: Any, message: Any) -> None:
    import asyncio

    twin = cl.AsyncLedger(ledger)

    async def calls() -> None:
        real = await twin.get_or_start(f"fuzz-{uuid4().hex}", system_prompt="s")
        await twin.append(real, {"role": "user", "content": "hello"})
        for call in (
            lambda: twin.append(conversation_id, message),
            lambda: twin.context(conversation_id),
            lambda: twin.pop(conversation_id),
            lambda: twin.retract(real, 0, reason=message),
            lambda: twin.edit(real, 0, message),
            lambda: twin.fork(real, key=message),
            lambda: twin.get_or_start(message),
            lambda: twin.rewind(real, message),
            lambda: twin.extend(conversation_id, message),
            lambda: twin.extend(real, message),
            lambda: twin.extend(real, [message], client_message_ids=message),
        ):
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
    call_with_junk(
        ledger,
        lambda: ledger.record_usage(cid, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens),
    )


@FUZZ
@given(policy=JUNK)
def test_change_policy_with_junk(ledger: cl.Ledger, policy: Any) -> None:
    cid = existing(ledger)
    call_with_junk(ledger, lambda: ledger.change_policy(cid, policy))


@FUZZ
@given(
    fields=st.dictionaries(
        st.sampled_from(
            [
                "trigger_messages",
                "keep_messages",
                "trigger_tokens",
                "keep_tokens",
                "summary_mode",
                "keep_tool_results",
                "max_context_tokens",
                "max_summary_tokens",
                "summarizer_model",
                "layered_max_tokens",
                "bogus",
            ]
        ),
        st.one_of(LONE_SURROGATES, JUNK),
        max_size=4,
    )
)
def test_policies_with_junk(ledger: cl.Ledger, fields: dict[str, Any]) -> None:
    try:
        policy = cl.ReductionPolicy(**fields)
    except cl.ContextLedgerError as exc:
        assert str(exc)
    else:  # a policy that is accepted can be stored
        call_with_junk(ledger, lambda: ledger.start("s", policy=policy))


@pytest.mark.parametrize("model", [cl.ReductionPolicy, cl.Settings])
def test_a_lone_surrogate_in_any_text_field_is_refused(model: Any) -> None:
    """Text that no store, digest or HTTP header can encode is refused when the policy
    or the settings are made, not when a background thread first stores or sends it."""
    base: dict[str, Any] = {"trigger_messages": 10, "keep_messages": 2} if model is cl.ReductionPolicy else {}
    texts = [
        name
        for name, field in model.model_fields.items()
        if "str" in str(field.annotation).lower() and name not in ("summary_mode", "stores")
    ]
    assert texts
    for name in texts:
        with pytest.raises((cl.InvalidPolicyError, cl.ConfigurationError), match="lone surrogate"):
            model(**base, **{name: "gpt-4o\ud800"})
    with pytest.raises(cl.ConfigurationError, match="lone surrogate"):
        cl.Settings(stores=("memory://", "sqlite:///\udc00.db"))


@FUZZ
@given(
    fields=st.dictionaries(
        st.sampled_from(
            [
                "database_url",
                "summarizer_model",
                "summarizer_timeout",
                "max_concurrent_summaries",
                "poll_interval",
                "snapshot_interval",
                "cipher_key",
                "openai_api_key",
                "openai_base_url",
                "bogus",
            ]
        ),
        st.one_of(LONE_SURROGATES, JUNK),
        max_size=3,
    )
)
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
@given(
    url=st.one_of(
        JUNK,
        LONE_SURROGATES.map(lambda s: f"sqlite:///{s}.db"),
        st.sampled_from(
            [
                "sqlite://",
                "mysql://x/y",
                "postgresql://",
                "memory:",
                "postgresql://u@h/\udc00",
                ["sqlite:///\ud800"],
                "sqlite:////no/such/folder/x.db",
                "postgresql://u:p@h:99999/db",
            ]
        ),
    )
)
def test_open_with_junk_urls(
    url: Any, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path_factory.mktemp("open"))  # no URL: a SQLite file right here
    try:
        cl.Ledger.open(url, run_policy=False).close()
    except cl.ContextLedgerError as exc:
        assert "p@" not in str(exc)  # a password never shows


@FUZZ
@given(
    argv=st.lists(
        st.one_of(
            st.text(max_size=12),
            st.sampled_from(
                [
                    "demo",
                    "context",
                    "transcript",
                    "replay",
                    "stats",
                    "export",
                    "verify",
                    "rebuild",
                    "worker",
                    "--database",
                    "--json",
                    "--version",
                    "-h",
                    "--shard",
                    "1/0",
                    "--messages",
                    "-5",
                ]
            ),
        ),
        max_size=5,
    )
)
def test_cli_argument_parsing_with_junk(
    argv: list[str],
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from contextledger.infrastructure.cli import main

    folder = tmp_path_factory.mktemp("cli")
    monkeypatch.chdir(folder)
    if "demo" in argv or "worker" in argv:
        return  # long-running commands are tried by their own tests
    code = main([*argv, "--database", f"sqlite:///{Path(folder) / 'absent.db'}"])
    assert code in (0, 1, 2)
