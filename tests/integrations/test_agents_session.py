"""``LedgerSession`` behaves as the Agents SDK expects of a session (the cases of the
SDK's own session tests: add, get with limit, settings, pop, clear, isolation,
concurrency, the Runner), plus what only the ledger adds."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, SessionSettings, SQLiteSession, set_tracing_disabled
from agents.memory.session import Session
from agents.run_internal.session_persistence import rewind_session_items
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.domain.values.errors import InvalidArgumentError, InvalidMessageError
from contextledger.integrations.agents import ABANDONED_CALL_OUTPUT, LedgerSession
from contextledger.testing import FakeOpenAIServer, Func, RecordedRequest, Reply

set_tracing_disabled(True)


@pytest.fixture(params=["sqlite", "postgres"])
def ledger(request: pytest.FixtureRequest) -> Iterator[cl.Ledger]:
    name = "sqlite_url" if request.param == "sqlite" else "postgres_url"
    with cl.Ledger.open(request.getfixturevalue(name)) as opened:
        yield opened


def user(text_: str) -> dict[str, Any]:
    return {"role": "user", "content": text_}


def contents(items: list[Any]) -> list[Any]:
    return [i.get("content") for i in items]


def test_a_ledger_session_satisfies_the_sdk_session_protocol(ledger: cl.Ledger) -> None:
    session = LedgerSession("protocol", ledger)
    assert isinstance(session, Session)
    assert session.session_id == "protocol"
    assert session.session_settings == SessionSettings()


def test_added_items_come_back_in_order_then_pop_and_clear_remove_them(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("direct", ledger)
        await session.add_items([user("Hello"), {"role": "assistant", "content": "Hi there!"}])
        assert contents(await session.get_items()) == ["Hello", "Hi there!"]
        popped = await session.pop_item()
        assert popped == {"role": "assistant", "content": "Hi there!"}
        assert contents(await session.get_items()) == ["Hello"]
        await session.clear_session()
        assert await session.get_items() == []
        await session.add_items([user("again")])
        assert contents(await session.get_items()) == ["again"]

    asyncio.run(scenario())


def test_a_limit_returns_the_newest_items_oldest_first(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("limit", ledger)
        await session.add_items([user("1"), {"role": "assistant", "content": "2"}, user("3"),
                                 {"role": "assistant", "content": "4"}])
        assert contents(await session.get_items(limit=2)) == ["3", "4"]
        assert len(await session.get_items()) == 4
        assert len(await session.get_items(limit=10)) == 4
        assert await session.get_items(limit=0) == []

    asyncio.run(scenario())


@pytest.mark.parametrize("settings", [SessionSettings(limit=3), {"limit": 3}], ids=["class", "dict"])
def test_session_settings_limit_is_the_default_and_an_explicit_limit_overrides_it(
    ledger: cl.Ledger, settings: Any
) -> None:
    async def scenario() -> None:
        session = LedgerSession("settings", ledger, session_settings=settings)
        assert session.session_settings.limit == 3
        await session.add_items([user(f"Message {i}") for i in range(10)])
        assert contents(await session.get_items()) == ["Message 7", "Message 8", "Message 9"]
        assert contents(await session.get_items(limit=2)) == ["Message 8", "Message 9"]

    asyncio.run(scenario())


def test_popping_an_empty_session_returns_none(ledger: cl.Ledger) -> None:
    assert asyncio.run(LedgerSession("empty", ledger).pop_item()) is None


def test_pop_and_clear_touch_only_their_own_session(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        one, two = LedgerSession("one", ledger), LedgerSession("two", ledger)
        await one.add_items([user("Session 1 message")])
        await two.add_items([user("Session 2 message 1"), user("Session 2 message 2")])
        assert (await two.pop_item()) == user("Session 2 message 2")
        assert contents(await one.get_items()) == ["Session 1 message"]
        assert contents(await two.get_items()) == ["Session 2 message 1"]
        await one.clear_session()
        assert await one.get_items() == []
        assert contents(await two.get_items()) == ["Session 2 message 1"]

    asyncio.run(scenario())


def test_a_new_session_object_with_the_same_id_sees_the_same_items_after_edits(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        first = LedgerSession("shared", ledger)
        await first.add_items([user("a"), user("b"), user("c")])
        await first.pop_item()
        assert contents(await LedgerSession("shared", ledger).get_items()) == ["a", "b"]
        await first.clear_session()
        assert await LedgerSession("shared", ledger).get_items() == []

    asyncio.run(scenario())


def test_unicode_and_sql_looking_content_is_stored_verbatim(ledger: cl.Ledger) -> None:
    items = [user("こんにちは 😊"), user("'); DROP TABLE events; --"), user('"quotes" \\ and \n newlines')]

    async def scenario() -> list[Any]:
        session = LedgerSession("verbatim", ledger)
        await session.add_items(items)
        return await session.get_items()

    assert asyncio.run(scenario()) == items


def test_concurrent_writers_to_one_session_lose_no_item(ledger: cl.Ledger) -> None:
    session = LedgerSession("concurrent", ledger)

    def add(n: int) -> None:
        asyncio.run(session.add_items([user(f"Message {n}")]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=5) as pool:
        list(pool.map(add, range(10)))
    got = asyncio.run(session.get_items())
    assert sorted(contents(got)) == sorted(f"Message {n}" for n in range(10))


def test_concurrent_sessions_keep_their_own_histories(ledger: cl.Ledger) -> None:
    async def talk(name: str) -> None:
        session = LedgerSession(name, ledger)
        for n in range(5):
            await session.add_items([user(f"{name} {n}")])

    async def scenario() -> None:
        await asyncio.gather(*(talk(f"s{k}") for k in range(4)))

    asyncio.run(scenario())
    for k in range(4):
        got = asyncio.run(LedgerSession(f"s{k}", ledger).get_items())
        assert contents(got) == [f"s{k} {n}" for n in range(5)]


def test_a_session_opened_from_a_url_owns_and_closes_its_ledger(sqlite_url: str) -> None:
    session = LedgerSession("by-url", url=sqlite_url)
    asyncio.run(session.add_items([user("kept")]))
    session.close()
    reopened = LedgerSession("by-url", url=sqlite_url)
    assert contents(asyncio.run(reopened.get_items())) == ["kept"]
    reopened.close()


def test_the_runner_remembers_per_session_and_isolates_sessions(ledger: cl.Ledger) -> None:
    def respond(request: RecordedRequest) -> Reply:
        said = [str(i.get("content")) for i in request.body["input"] if i.get("role") == "user"]
        return Reply("You said: " + " | ".join(said))

    with FakeOpenAIServer(default=Func(respond)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        agent = Agent(name="a", model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
        cats, dogs = LedgerSession("cats", ledger), LedgerSession("dogs", ledger)

        async def scenario() -> str:
            await Runner.run(agent, "I like cats.", session=cats)
            await Runner.run(agent, "I like dogs.", session=dogs)
            result = await Runner.run(agent, "What animal did I say I like?", session=cats)
            return str(result.final_output)

        answer = asyncio.run(scenario())
    assert "cats" in answer and "dogs" not in answer
    assert len(asyncio.run(cats.get_items())) == 4


def _call(n: int, name: str = "f") -> dict[str, Any]:
    return {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name,
            "arguments": f'{{"n": {n}}}', "status": "completed"}


def _output(n: int, text_: str = "ok") -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": f"call_{n}", "output": text_}


REASONING = {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "two tools"}]}
ANSWER = {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
          "content": [{"type": "output_text", "text": "both done", "annotations": []}]}
#: A turn with reasoning, parallel calls, their outputs and an answer, then a second turn.
TURNS = [user("go"), REASONING, _call(1), _call(2, "g"), _output(1), _output(2), ANSWER,
         user("again"), {"role": "assistant", "content": "fine"}]


# (run_streamed is left out: the local server answers without streaming.)
@pytest.mark.parametrize("mode", ["run", "run_sync"])
def test_every_runner_mode_reads_and_writes_the_session(ledger: cl.Ledger, mode: str) -> None:
    def respond(request: RecordedRequest) -> Reply:
        said = [str(i.get("content")) for i in request.body["input"] if i.get("role") == "user"]
        return Reply("You said: " + " | ".join(said))

    session = LedgerSession(f"mode-{mode}", ledger)
    with FakeOpenAIServer(default=Func(respond)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test")
        agent = Agent(name="a", model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))

        async def both() -> str:
            await Runner.run(agent, "I like cats.", session=session)
            return str((await Runner.run(agent, "What do I like?", session=session)).final_output)

        if mode == "run_sync":  # its own event loop, one per call
            Runner.run_sync(agent, "I like cats.", session=session)
            answer = str(Runner.run_sync(agent, "What do I like?", session=session).final_output)
        else:
            answer = asyncio.run(both())
    assert answer == "You said: I like cats. | What do I like?"
    assert contents(asyncio.run(session.get_items()))[::2] == ["I like cats.", "What do I like?"]


def test_each_pop_takes_exactly_one_item_as_sqlite_session_does(ledger: cl.Ledger, tmp_path: Any) -> None:
    async def scenario() -> None:
        ours = LedgerSession("pops", ledger)
        theirs = SQLiteSession("pops", str(tmp_path / "sdk.db"))
        for session in (ours, theirs):
            await session.add_items(list(TURNS))
        for _ in range(4):  # down into the tool-call group: one output, then the other
            assert await ours.pop_item() == await theirs.pop_item()
            assert await ours.get_items() == await theirs.get_items()
        assert await ours.get_items() == [user("go"), REASONING, _call(1), _call(2, "g"), _output(1)]
        for session in (ours, theirs):  # the call left open is answered again
            await session.add_items([_output(2, "again")])
        assert await ours.get_items() == await theirs.get_items()
        while (popped := await theirs.pop_item()) is not None:
            assert await ours.pop_item() == popped
            assert await ours.get_items() == await theirs.get_items()
        assert await ours.pop_item() is None
        theirs.close()

    asyncio.run(scenario())
    # The log keeps every item that was ever added, and its chain still verifies.
    session = LedgerSession("pops", ledger)
    assert session.transcript_items()[: len(TURNS)] == TURNS
    assert ledger.verify(session.conversation_id).ok


def test_pops_reach_into_summarized_history_item_by_item_as_sqlite_session_pops(
    ledger: cl.Ledger, tmp_path: Any
) -> None:
    turns = [item for t in range(8) for item in (user(f"q{t}"), _call(t), _output(t, f"r{t}"),
                                                 {**ANSWER, "id": f"msg_{t}"})]

    async def scenario() -> None:
        ours = LedgerSession("summarized", ledger, policy=cl.ReductionPolicy(trigger_messages=6, keep_messages=2))
        theirs = SQLiteSession("summarized", str(tmp_path / "sdk.db"))
        for start in range(0, len(turns), 4):
            for session in (ours, theirs):
                await session.add_items(turns[start : start + 4])
            ledger.wait_idle()
        assert ledger.summaries(ours.conversation_id)
        while (popped := await theirs.pop_item()) is not None:
            assert await ours.pop_item() == popped
        assert await ours.pop_item() is None
        assert await ours.get_items() == []
        theirs.close()
        assert ledger.verify(ours.conversation_id).ok

    asyncio.run(scenario())


def test_the_sdks_pop_and_compare_rewind_leaves_what_sqlite_session_leaves(
    ledger: cl.Ledger, tmp_path: Any
) -> None:
    async def scenario() -> None:
        ours = LedgerSession("rewind", ledger)
        theirs = SQLiteSession("rewind", str(tmp_path / "sdk.db"))
        for session in (ours, theirs):
            await session.add_items(list(TURNS[:7]))
            # The SDK's own rewind: pops one item at a time and compares each with the
            # item it expects, restoring what it popped on a mismatch.
            await rewind_session_items(session, [_output(2), ANSWER])
        assert await ours.get_items() == await theirs.get_items()
        assert await ours.get_items() == [user("go"), REASONING, _call(1), _call(2, "g"), _output(1)]
        theirs.close()

    asyncio.run(scenario())


def test_a_new_user_item_after_unanswered_calls_closes_them_as_abandoned(ledger: cl.Ledger) -> None:
    async def scenario() -> list[Any]:
        session = LedgerSession("abandoned", ledger)
        await session.add_items([user("delete both"), _call(1), _call(2, "g")])
        await session.add_items([_output(1)])  # one call ran; the other waits for approval
        await session.add_items([user("never mind")])  # the next run moves on
        return await session.get_items()

    items = asyncio.run(scenario())
    closed = {"type": "function_call_output", "call_id": "call_2", "output": ABANDONED_CALL_OUTPUT}
    assert items == [user("delete both"), _call(1), _call(2, "g"), _output(1), closed, user("never mind")]
    cid = LedgerSession("abandoned", ledger).conversation_id
    context = ledger.context(cid)  # valid by OpenAI's rules: every call answered
    assert context[-2] == {"role": "tool", "tool_call_id": "call_2", "content": ABANDONED_CALL_OUTPUT}
    assert ledger.verify(cid).ok


def test_an_output_that_answers_no_call_is_refused_and_nothing_is_written(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("refused", ledger)
        await session.add_items([user("go"), _call(1)])
        before = session.transcript_items()
        with pytest.raises(InvalidMessageError, match="must answer a call"):
            await session.add_items([user("moving on"), _output(7)])
        assert session.transcript_items() == before  # the abandoned answer was not written either
        assert await session.get_items() == [user("go"), _call(1)]

    asyncio.run(scenario())


def test_a_late_output_for_an_abandoned_call_replaces_its_answer_once(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("late", ledger)
        await session.add_items([user("go"), _call(1)])
        await session.add_items([user("other"), {"role": "assistant", "content": "sure"}])
        await session.add_items([_output(1, "late result")])  # the approval was resumed after all
        assert await session.get_items() == [
            user("go"), _call(1), _output(1, "late result"), user("other"),
            {"role": "assistant", "content": "sure"},
        ]
        before = ledger.transcript(session.conversation_id)
        with pytest.raises(InvalidMessageError):
            await session.add_items([_output(1, "once more")])
        assert ledger.transcript(session.conversation_id) == before
        assert ledger.verify(session.conversation_id).ok

    asyncio.run(scenario())


def test_an_item_that_is_not_a_dict_or_a_model_is_refused_and_nothing_is_written(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("not-items", ledger)
        with pytest.raises(InvalidArgumentError, match="a session item must be a dict"):
            await session.add_items([user("kept?"), object()])  # type: ignore[list-item]
        assert await session.get_items() == []

    asyncio.run(scenario())


def test_the_abandoned_output_can_be_worded_by_the_application(ledger: cl.Ledger) -> None:
    async def scenario() -> list[Any]:
        session = LedgerSession("worded", ledger, abandoned_call_output="error: not approved in time")
        await session.add_items([user("go"), _call(1)])
        await session.add_items([user("other")])
        return await session.get_items()

    assert asyncio.run(scenario())[2]["output"] == "error: not approved in time"


# ------------------------------------------------------------------ construction


def _open_files(path: Path) -> list[str]:
    found = []
    for fd in Path("/proc/self/fd").iterdir():
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(str(path)):
                found.append(str(fd))
    return found


@pytest.mark.parametrize("form", ["url", "relative path", "absolute path", "pathlib", "db_path="])
def test_a_session_takes_a_url_or_a_path_positionally_as_sqlite_session_does(
    form: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    where: Any = {
        "url": f"sqlite:///{tmp_path / 'chat.db'}",
        "relative path": "chat.db",
        "absolute path": str(tmp_path / "chat.db"),
        "pathlib": tmp_path / "chat.db",
        "db_path=": "chat.db",
    }[form]
    session = LedgerSession("user-1", db_path=where) if form == "db_path=" else LedgerSession("user-1", where)
    asyncio.run(session.add_items([user("kept")]))
    session.close()
    assert (tmp_path / "chat.db").exists()
    with cl.Ledger.open(f"sqlite:///{tmp_path / 'chat.db'}") as ledger:
        assert contents(asyncio.run(LedgerSession("user-1", ledger).get_items())) == ["kept"]


@pytest.mark.postgres
def test_a_session_takes_a_postgresql_url_positionally(postgres_url: str) -> None:
    session = LedgerSession("user-1", postgres_url)
    asyncio.run(session.add_items([user("kept")]))
    session.close()
    with cl.Ledger.open(postgres_url) as ledger:
        assert contents(asyncio.run(LedgerSession("user-1", ledger).get_items())) == ["kept"]


def test_a_store_that_cannot_open_raises_the_ledgers_error_and_leaves_no_thread(tmp_path: Path) -> None:
    threads = threading.active_count()
    with pytest.raises(cl.ContextLedgerError, match="folder of the SQLite file does not exist"):
        LedgerSession("user-1", str(tmp_path / "missing" / "chat.db"))
    assert threading.active_count() == threads
    assert list(tmp_path.iterdir()) == []


def test_memory_as_sqlite_session_spells_it_is_the_memory_store() -> None:
    session = LedgerSession("user-1", ":memory:")
    asyncio.run(session.add_items([user("hi")]))
    assert contents(asyncio.run(session.get_items())) == ["hi"]
    session.close()


@pytest.mark.parametrize(
    "args, kwargs, argument",
    [
        ((42,), {}, "db"),
        ((b"chat.db",), {}, "db"),
        (({"url": "sqlite:///x.db"},), {}, "db"),
        (("",), {}, "db"),
        (("chat.db",), {"url": "sqlite:///other.db"}, "url"),
        (("chat.db",), {"db_path": "other.db"}, "db_path"),
        ((), {"db_path": 3}, "db_path"),
        (("chat.db",), {"session_settings": {"limit": "many"}}, "session_settings"),
        (("chat.db",), {"session_settings": "limit=3"}, "session_settings"),
        (("chat.db",), {"summary_role": "assistant"}, "summary_role"),
        (("chat.db",), {"policy": {"trigger_messages": 4}}, "policy"),
        (("chat.db",), {"abandoned_call_output": " "}, "abandoned_call_output"),
    ],
)
def test_a_bad_argument_is_refused_before_anything_is_opened(
    args: tuple[Any, ...], kwargs: dict[str, Any], argument: str, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    threads = threading.active_count()
    with pytest.raises(InvalidArgumentError) as raised:
        LedgerSession("user-1", *args, **kwargs)
    assert raised.value.argument == argument
    assert threading.active_count() == threads
    assert list(tmp_path.iterdir()) == []  # no database file was even created


@pytest.mark.parametrize("settings", [{"limitt": 1}, {"limit": 3, "offset": 2}, 3, "limit=3"])
def test_session_settings_the_sdk_refuses_with_type_error_raise_type_error_here_too(
    settings: Any, tmp_path: Path
) -> None:
    # The SDK's own session first: what it raises is what code written for it catches.
    with pytest.raises(TypeError) as sdk:
        SQLiteSession("s", str(tmp_path / "sdk.db"), session_settings=settings)
    with pytest.raises(TypeError) as ours:
        LedgerSession("s", "memory://", session_settings=settings)
    assert isinstance(ours.value, cl.InvalidArgumentTypeError)
    assert isinstance(ours.value, InvalidArgumentError)
    assert ours.value.argument == "session_settings"
    if isinstance(settings, dict):
        assert str(sdk.value) in str(ours.value)  # "Unknown session settings: limitt"


def test_a_failed_construction_leaves_an_existing_database_free(tmp_path: Path) -> None:
    path = tmp_path / "chat.db"
    with cl.Ledger.open(f"sqlite:///{path}") as ledger:
        asyncio.run(LedgerSession("user-1", ledger).add_items([user("kept")]))
    threads = threading.active_count()
    with pytest.raises(InvalidArgumentError):
        LedgerSession("user-1", str(path), session_settings={"limit": "many"})
    assert threading.active_count() == threads
    assert _open_files(path) == []
    session = LedgerSession("user-1", str(path))
    assert contents(asyncio.run(session.get_items())) == ["kept"]
    session.close()
    assert _open_files(path) == []
    path.unlink()


def test_pop_and_clear_keep_the_session_on_its_conversation(ledger: cl.Ledger) -> None:
    """As docs/integrations.md says: no fresh conversation, the items are retracted."""

    async def scenario() -> None:
        session = LedgerSession("kept", ledger)
        await session.add_items([user("a"), user("b"), user("c")])
        cid, started = session.conversation_id, ledger.conversation_ids()
        await session.pop_item()
        await session.clear_session()
        await session.add_items([user("d")])
        assert session.conversation_id == cid and ledger.conversation_ids() == started
        assert contents(await session.get_items()) == ["d"]
        assert contents(session.transcript_items()) == ["a", "b", "c", "d"]
        assert [e.retracted for e in ledger.transcript(cid)] == [True, True, True, False]

    asyncio.run(scenario())
