"""The viewer's app in process (Starlette's TestClient): the list follows the log as
it grows, URLs are shown masked, unknown event kinds are shown, the chart stays in
its frame."""

from __future__ import annotations

import warnings
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

from hypothesis import given, settings
from hypothesis import strategies as st

with warnings.catch_warnings():
    # Starlette's TestClient announces a move to another HTTP client; httpx still works.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

import contextledger as cl
from contextledger.infrastructure.web import create_app
from contextledger.infrastructure.web.chart import token_chart
from contextledger.infrastructure.web.paging import Paging, sample
from contextledger.infrastructure.web.views import _timeline_entry
from contextledger.testing import ScriptedSummarizer


def test_the_list_follows_new_conversations_and_new_activity_without_writing() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        first = ledger.start("You help.")
        second = ledger.start("You help.")
        client = TestClient(create_app(ledger))
        listed = client.get("/conversations.json").json()
        assert [c["id"] for c in listed["conversations"]] == [str(second), str(first)]
        ledger.append(first, {"role": "user", "content": "back again"})
        third = ledger.start("You help.")
        listed = client.get("/conversations.json").json()
        assert [c["id"] for c in listed["conversations"]] == [str(third), str(first), str(second)]
        assert listed["conversations"][1]["messages"] == 1
        top = ledger.recorder.max_notification_id()
        client.get(f"/conversations/{first}")
        client.get(f"/conversations/{first}/context?version=1")
        assert ledger.recorder.max_notification_id() == top


def test_the_list_is_paginated_newest_first() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        ids = [ledger.start("You help.") for _ in range(5)]
        client = TestClient(create_app(ledger, page_size=2))
        pages = [client.get(f"/conversations.json?page={n}").json() for n in (1, 2, 3)]
        assert [p["pages"] for p in pages] == [3, 3, 3]
        shown = [c["id"] for p in pages for c in p["conversations"]]
        assert shown == [str(cid) for cid in reversed(ids)]
        html = client.get("/conversations?page=2").text
        assert 'rel="prev"' in html and 'rel="next"' in html


def test_the_database_url_is_shown_with_its_password_masked(postgres_url: str) -> None:
    with_password = postgres_url.replace("postgresql://postgres@", "postgresql://postgres:s3cret-pw@")
    cl.Ledger.open(postgres_url, run_policy=False).close()  # the viewer opens a store read-only
    app = create_app(with_password)
    with TestClient(app) as client:
        html = client.get("/conversations").text
        data = client.get("/conversations.json").json()
    assert "s3cret-pw" not in html and "s3cret-pw" not in data["database"]
    assert "postgres:***@127.0.0.1" in html and data["database"].startswith("postgresql://postgres:***@")


def test_an_event_kind_the_viewer_does_not_know_is_shown_with_its_fields() -> None:
    future = cl.AuditEvent(
        version=9, timestamp=datetime.now(UTC), kind="MessageRetracted",
        data={"position": 3, "reason": "<b>asked</b>"}, conversation_id=uuid4(),
    )
    entry = _timeline_entry(future)
    assert entry["known"] is False
    assert entry["description"] == "MessageRetracted: position, reason"
    assert entry["data"] == {"position": 3, "reason": "<b>asked</b>"}


turns = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**6)), min_size=1, max_size=300
).map(lambda pairs: [
    {"turn": i + 1, "version": i + 2, "position": i, "sent_tokens": min(a, b),
     "full_history_tokens": max(a, b)}
    for i, (a, b) in enumerate(pairs)
])


@settings(max_examples=60, deadline=None)
@given(turns=turns, after=st.lists(st.integers(0, 300), max_size=10))
def test_every_point_and_mark_of_the_chart_lies_inside_its_frame(
    turns: list[dict[str, Any]], after: list[int]
) -> None:
    marks = [{"after_turn": min(a, len(turns)), "version": 1, "from_position": 0, "through_position": 1}
             for a in after]
    chart = token_chart(turns, marks)
    left, top, right, bottom = chart.plot
    assert len(chart.points) == len(turns) and len(chart.marks) == len(marks)
    for p in chart.points:
        assert left <= p["x"] <= right
        assert top <= p["y_full"] <= p["y_sent"] <= bottom
    for m in chart.marks:
        assert left <= m["x"] <= right
    assert chart.y_ticks[0]["label"] == "0"


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, 50_000), limit=st.integers(1, 500))
def test_a_chart_sample_keeps_at_most_its_limit_and_the_last_turn(count: int, limit: int) -> None:
    chosen = sample(count, limit)
    assert len(chosen) <= limit and chosen <= set(range(count))
    if count <= limit:
        assert chosen == set(range(count))
    if count:
        assert count - 1 in chosen and (limit < 2 or 0 in chosen)


@settings(max_examples=200, deadline=None)
@given(total=st.integers(0, 10_000), per_page=st.integers(1, 1000))
def test_the_pages_of_a_list_cover_it_once_in_order(total: int, per_page: int) -> None:
    pages = [Paging(n, per_page, total) for n in range(1, Paging(1, per_page, total).pages + 2)]
    covered = [i for p in pages for i in range(p.start, p.stop)]
    assert covered == list(range(total))
    last = pages[-2].record("/x", per_page)
    assert last["next"] is None and pages[-1].start == pages[-1].stop == total


def test_edits_and_forks_are_marked_in_pages_and_json() -> None:
    policy = cl.ReductionPolicy(trigger_messages=4, keep_messages=2)
    with cl.Ledger.open("memory://", summarizer=ScriptedSummarizer(), run_policy=True) as ledger:
        cid = ledger.start("You help.", policy=policy)
        for turn in range(4):
            ledger.append(cid, {"role": "user", "content": f"question {turn}"})
            ledger.append(cid, {"role": "assistant", "content": f"answer {turn}"})
        assert ledger.wait_idle(30)
        ledger.retract(cid, 0, reason="<i>private</i>")
        ledger.edit(cid, 7, {"role": "assistant", "content": "answer 3, corrected"})
        fork = ledger.fork(cid)
        client = TestClient(create_app(ledger))

        data = client.get(f"/conversations/{cid}.json").json()
        by_version = {e["version"]: e for e in data["events"]}
        appended = {e["position"]: e for e in data["events"] if e["kind"] == "MessageAppended"}
        assert appended[0]["marks"]["retracted"] is True
        assert appended[0]["marks"]["retracted_reason"] == "<i>private</i>"
        edit = next(e for e in data["events"] if e["kind"] == "MessageEdited")
        assert appended[7]["marks"]["superseded_by_version"] == edit["version"]
        assert edit["marks"]["original"]["content"] == "answer 3"
        assert edit["known"] and by_version[appended[0]["marks"]["retracted_version"]]["known"]
        invalid = [s for s in data["summaries"] if not s["valid"]]
        assert invalid and invalid[0]["invalidated_reason"] == "retracted"
        assert data["fork_of"] is None
        assert data["totals"]["retracted_messages"] == 1 and data["totals"]["edited_messages"] == 1

        html = client.get(f"/conversations/{cid}").text
        assert "retracted at" in html and "&lt;i&gt;private&lt;/i&gt;" in html and "<i>private" not in html
        assert "replaced by the edit at" in html and "edit of version" in html
        assert 'class="invalidated"' in html

        # Paged by two: the retracted message (page 1) links to its retraction's page.
        retracted_at = appended[0]["marks"]["retracted_version"]
        first = client.get(f"/conversations/{cid}?per_page=2").text
        wanted = f'href="?page={(retracted_at - 1) // 2 + 1}&amp;per_page=2#v{retracted_at}"'
        assert wanted in first and first.count('<tr id="v') == 2
        later = client.get(f"/conversations/{cid}?per_page=2&page={(retracted_at - 1) // 2 + 1}").text
        assert f'<tr id="v{retracted_at}"' in later

        forked = client.get(f"/conversations/{fork}.json").json()
        assert forked["fork_of"]["conversation_id"] == str(cid)
        assert forked["conversation"]["forked_from"] == str(cid)
        assert forked["events"][0]["kind"] == "Forked" and forked["events"][0]["known"]
        page = client.get(f"/conversations/{fork}").text
        assert f'href="/conversations/{cid}" id="fork-source"' in page
        listed = client.get("/conversations.json").json()["conversations"]
        assert {c["id"] for c in listed} == {str(cid), str(fork)}
        assert f"fork of <a href=\"/conversations/{cid}\">" in client.get("/conversations").text
