"""``get_items()`` renders the working memory once per change of the conversation and
hands out copies: what a caller does to them never reaches the next call, another
writer's items and an erasure are seen at once, and a reused rendering equals a fresh one."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("agents")

import contextledger as cl
from contextledger.application.facade.session_items import session_items
from contextledger.application.formats.items import ItemsView
from contextledger.integrations.agents import LedgerSession


@pytest.fixture(params=["sqlite", "postgres"])
def url(request: pytest.FixtureRequest) -> str:
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def ledger(url: str) -> Iterator[cl.Ledger]:
    with cl.Ledger.open(url, run_policy=False) as opened:
        yield opened


def said(words: str) -> dict[str, Any]:
    return {
        "id": f"msg_{words}",
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": words, "annotations": []}],
    }


TURN = [
    {"role": "user", "content": "look it up"},
    {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": '{"q": [1, 2]}'},
    {"type": "function_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "found"}]},
    said("here it is"),
]


def fresh(session: LedgerSession) -> list[dict[str, Any]]:
    """The session's items rendered anew (no view kept between calls)."""
    return session_items(session.ledger, session.conversation_id, summary_role=session.summary_role)


def test_items_a_caller_changes_do_not_change_what_the_next_call_returns(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("copies", ledger)
        await session.add_items(copy.deepcopy(TURN))
        first = await session.get_items()
        assert first == TURN
        first[3]["content"][0]["text"] = "changed"
        first[1]["arguments"] = "changed"
        first[2]["output"].append({"type": "input_text", "text": "more"})
        first.append({"role": "user", "content": "extra"})
        again = await session.get_items()  # the same conversation: the kept rendering
        assert again == TURN
        again[0]["content"] = "changed too"
        await session.add_items([{"role": "user", "content": "next"}])
        after = await session.get_items()  # rendered again after the change
        assert after == [*TURN, {"role": "user", "content": "next"}]
        assert after == fresh(session)

    asyncio.run(scenario())


def test_a_kept_rendering_gives_way_to_what_another_ledger_wrote(url: str) -> None:
    async def scenario() -> None:
        with cl.Ledger.open(url, run_policy=False) as mine, cl.Ledger.open(url, run_policy=False) as theirs:
            session = LedgerSession("shared", mine)
            await session.add_items([{"role": "user", "content": "one"}])
            assert len(await session.get_items()) == 1
            await LedgerSession("shared", theirs).add_items([{"role": "assistant", "content": "two"}])
            items = await session.get_items()
            assert [i["content"] for i in items] == ["one", "two"]
            assert items == fresh(session)

    asyncio.run(scenario())


def test_a_kept_rendering_of_an_erased_conversation_is_not_handed_out(ledger: cl.Ledger) -> None:
    async def scenario() -> None:
        session = LedgerSession("erased", ledger, subject="user-7")
        await session.add_items(copy.deepcopy(TURN))
        assert await session.get_items() == TURN
        ledger.erase(subject="user-7", reason="asked to be forgotten")
        with pytest.raises(cl.ConversationErasedError):
            await session.get_items()

    asyncio.run(scenario())


def test_pending_calls_a_summary_and_placeholders_render_as_a_fresh_rendering_does(ledger: cl.Ledger) -> None:
    policy = cl.ReductionPolicy(trigger_messages=8, keep_messages=3, keep_tool_results=1)

    async def scenario() -> None:
        session = LedgerSession("reduced", ledger, policy=policy)
        for n in range(6):
            await session.add_items(
                [
                    {"role": "user", "content": f"q{n}"},
                    {"type": "function_call", "call_id": f"c{n}", "name": "f", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": f"c{n}", "output": f"out {n} " * 20},
                ]
            )
            assert await session.get_items() == fresh(session)
            summary = ledger.pending_summary(session.conversation_id)
            if summary is not None:
                ledger.record_summary(summary, cl.SummaryResult(f"summary {n}", "scripted", "v1"))
            assert await session.get_items() == fresh(session)
        await session.add_items(
            [
                {"role": "user", "content": "hidden"},
                {"type": "function_call", "call_id": "h", "name": "f", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "h", "output": "secret"},
            ],
            hidden_call_ids=["h"],
        )
        assert await session.get_items() == fresh(session)
        await session.add_items(
            [{"type": "function_call", "call_id": "open", "name": "f", "arguments": "{}"}]
        )
        items = await session.get_items()
        assert items == fresh(session)
        assert items[-1]["call_id"] == "open"  # the call still waiting for its output
        assert any("Summary of the earlier conversation" in str(i.get("content")) for i in items)
        assert any("result omitted from context" in str(i.get("output", "")) for i in items)

    asyncio.run(scenario())


def test_a_view_renders_once_then_adds_what_was_appended_and_renders_again_after_a_summary(
    ledger: cl.Ledger,
) -> None:
    cid = ledger.start(
        system_prompt="be brief", policy=cl.ReductionPolicy(trigger_messages=6, keep_messages=2)
    )
    view = ItemsView()

    def read(role: Any = "system") -> list[dict[str, Any]]:
        items = ledger.store.read(cid, lambda c: view.items(c, role, open_group=True))
        assert items == ledger.store.read(
            cid, lambda c: ItemsView().items(c, role, open_group=True)
        )  # what a rendering afresh gives
        return items

    ledger.append_items(cid, copy.deepcopy(TURN))
    first = read()
    first[-1]["content"][0]["text"] = "changed"
    assert read()[1:] == TURN
    assert (view.renders, view.extensions) == (1, 0)
    read("developer")
    assert (view.renders, view.extensions) == (2, 0)
    ledger.append_items(cid, [{"role": "user", "content": "more"}])
    assert read("developer")[-1] == {"role": "user", "content": "more"}
    assert (view.renders, view.extensions) == (2, 1)
    ledger.append_items(cid, [{"type": "function_call", "call_id": "w", "name": "f", "arguments": "{}"}])
    assert read("developer")[-1]["call_id"] == "w"  # the open group's call, after the working memory
    ledger.append_items(cid, [{"type": "function_call_output", "call_id": "w", "output": "done"}])
    assert read("developer")[-1]["output"] == "done"
    summary = ledger.pending_summary(cid)
    assert summary is not None
    ledger.record_summary(summary, cl.SummaryResult("so far", "scripted", "v1"))
    renders = view.renders
    items = read("developer")
    assert view.renders == renders + 1
    assert items[1] == {"type": "message", "role": "developer", "content": items[1]["content"]}
    assert "so far" in items[1]["content"]


def test_many_extensions_in_a_row_equal_fresh_renderings_and_stay_private(ledger: cl.Ledger) -> None:
    from contextledger.application.formats.items import MAX_PIECES

    cid = ledger.start(system_prompt="be brief")
    view = ItemsView()
    ledger.append_items(cid, copy.deepcopy(TURN))
    ledger.store.read(cid, lambda c: view.items(c, open_group=True))
    for n in range(2 * MAX_PIECES + 3):
        if n % 5 == 1:  # the call left open by the last round answered
            ledger.append_items(
                cid, [{"type": "function_call_output", "call_id": f"o{n - 1}", "output": "ok"}]
            )
        ledger.append_items(cid, [{"role": "user", "content": f"q{n}"}])
        if n % 5 == 0:  # an open call at the end (rendered after the working memory)
            ledger.append_items(
                cid, [{"type": "function_call", "call_id": f"o{n}", "name": "f", "arguments": "{}"}]
            )
        items = ledger.store.read(cid, lambda c: view.items(c, open_group=True))
        again = ledger.store.read(cid, lambda c: view.items(c, open_group=True))
        assert items == again == ledger.store.read(cid, lambda c: ItemsView().items(c, open_group=True))
        items[1]["content"] = "changed"  # a caller's change reaches neither the next call...
        again.clear()
        assert ledger.store.read(cid, lambda c: view.items(c, open_group=True))[1:5] == TURN
    assert (view.renders, view.extensions) == (1, 2 * MAX_PIECES + 3)
