"""``LedgerSession`` behaves as the Agents SDK expects of a session (the cases of the
SDK's own session tests: add, get with limit, settings, pop, clear, isolation,
concurrency, the Runner), plus what only the ledger adds."""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

from agents import Agent, OpenAIResponsesModel, Runner, SessionSettings, set_tracing_disabled
from agents.memory.session import Session
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.integrations.agents import LedgerSession
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


def test_popping_a_parallel_call_output_retracts_its_whole_group(ledger: cl.Ledger) -> None:
    calls = [
        {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name,
         "arguments": f'{{"n": {n}}}', "status": "completed"}
        for n, name in ((1, "f"), (2, "g"))
    ]
    outputs = [{"type": "function_call_output", "call_id": c["call_id"], "output": "ok"} for c in calls]

    async def scenario() -> tuple[list[Any], list[Any]]:
        session = LedgerSession("parallel", ledger)
        await session.add_items([user("go"), *calls, *outputs])
        assert await session.pop_item() == outputs[1]
        return await session.get_items(), session.transcript_items()

    items, transcript = asyncio.run(scenario())
    # A function call and its outputs are one group: popping one output retracts the
    # group (no call is ever left without its output); the log keeps every item.
    assert items == [user("go")]
    assert transcript == [user("go"), *calls, *outputs]


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
