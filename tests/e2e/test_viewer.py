"""``contextledger serve`` as a person uses it: the command runs as a subprocess on a
real SQLite store, a real headless Chromium browses it, and the JSON endpoints are
fetched over HTTP. The three main pages are saved as screenshots (into
``$CONTEXTLEDGER_SCREENSHOTS`` when set, e.g. ``docs/images``)."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Dialog, Page, sync_playwright

from contextledger import Ledger
from tests.support.viewer import (
    CHROMIUM,
    CHROMIUM_ARGS,
    IN_CLEAR,
    SCRIPT_MESSAGE,
    Store,
    build_store,
    offline_env,
    serve_forked,
    tamper,
)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build_store(tmp_path_factory.mktemp("viewer") / "ledger.db")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[str]:
    before = _digest(store.path)
    with serve_forked(store.served_url, cwd=store.path.parent) as base:
        yield base
    assert _digest(store.path) == before, "the viewer wrote to the store"


@pytest.fixture(scope="module")
def tampered(store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int, int]]:
    """A copy of the store with one message's stored bytes edited; yields the base
    URL of a server on it, the edited position and its event's version."""
    folder = tmp_path_factory.mktemp("tampered")
    path = folder / "ledger.db"
    with sqlite3.connect(store.path) as source, sqlite3.connect(path) as target:
        source.backup(target)
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        position = next(e.position for e in ledger.transcript(store.demo)
                        if e.position >= 20 and e.message["role"] == "user")
    version = tamper(path, store.demo, position)
    with serve_forked("sqlite:///ledger.db", cwd=folder) as base:
        yield base, position, version


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page that records any dialog (alert, confirm) a script would open."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    one = context.new_page()
    dialogs: list[str] = []

    def on_dialog(dialog: Dialog) -> None:
        dialogs.append(dialog.message)
        dialog.dismiss()

    one.on("dialog", on_dialog)
    one.dialogs = dialogs  # type: ignore[attr-defined]
    yield one
    context.close()


def _screenshot(page: Page, name: str, tmp_path: Path) -> Path:
    """Save the page (the docs' images are made here), checking first that it shows
    nothing of the machine that made it: no temporary folder, no pytest path."""
    shown = page.content()
    for local in (tempfile.gettempdir(), str(tmp_path.parent.parent), "pytest-of-"):
        assert local not in shown, f"the page shows a local path: {local}"
    folder = Path(os.environ.get("CONTEXTLEDGER_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path))
    assert path.stat().st_size > 10_000
    return path


def _get(url: str) -> tuple[int, str, Any]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            body = response.read().decode("utf-8")
            kind = response.headers.get("content-type", "")
            return response.status, kind, json.loads(body) if "json" in kind else body
    except urllib.error.HTTPError as exc:
        body = exc.read().decode("utf-8")
        kind = exc.headers.get("content-type", "")
        return exc.code, kind, json.loads(body) if "json" in kind else body


def _context_shown(page: Page) -> list[dict[str, Any]]:
    """The messages the context page shows, read back from the page's text."""
    shown = []
    for item in page.locator("#context > li").all():
        message: dict[str, Any] = {"role": item.locator(".role").text_content()}
        content = item.locator(".content")
        message["content"] = content.text_content() if content.count() else None
        calls = [
            (call.locator(".fn").text_content(), call.locator("code").text_content())
            for call in item.locator(".call").all()
        ]
        if calls:
            message["calls"] = calls
        shown.append(message)
    return shown


def _as_shown(message: dict[str, Any]) -> dict[str, Any]:
    expected: dict[str, Any] = {"role": message["role"], "content": message.get("content") or None}
    if message.get("tool_calls"):
        expected["calls"] = [(c["function"]["name"], c["function"]["arguments"]) for c in message["tool_calls"]]
    return expected


# ---------------------------------------------------------------- in the browser


def test_the_list_shows_every_conversation_newest_activity_first(
    server: str, store: Store, page: Page, tmp_path: Path
) -> None:
    page.goto(server + "/")
    ids = page.locator("#conversations a.cid").all_text_contents()
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        newest_first = sorted(ledger.conversation_ids(),
                              key=lambda cid: ledger.conversation(cid).modified_on, reverse=True)
    assert ids == [str(cid) for cid in newest_first]
    assert "4 conversations" in page.locator("#count").inner_text()
    assert page.locator("header .db").inner_text() == "sqlite:///ledger.db"
    _screenshot(page, "viewer-conversations.png", tmp_path)


def test_searching_by_part_of_an_id_narrows_the_list_to_that_conversation(
    server: str, store: Store, page: Page
) -> None:
    page.goto(server + "/conversations")
    part = str(store.hostile)[9:18]
    page.fill("#q", part.upper())
    page.press("#q", "Enter")
    page.wait_for_url("**/conversations?q=*")
    assert page.locator("#conversations a.cid").all_text_contents() == [str(store.hostile)]
    page.fill("#q", "no-such-conversation")
    page.press("#q", "Enter")
    page.wait_for_url("**q=no-such-conversation*")
    assert page.locator("#conversations").count() == 0
    assert "No conversations match" in page.locator("main").inner_text()


def test_a_conversation_shows_its_timeline_integrity_summaries_and_token_chart(
    server: str, store: Store, page: Page, tmp_path: Path
) -> None:
    page.goto(server + "/conversations")
    page.click(f"text={store.demo}")
    page.wait_for_url(f"**/conversations/{store.demo}")
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        events = list(ledger.replay(store.demo))
        summaries = ledger.summaries(store.demo)
        turns = sum(1 for e in ledger.transcript(store.demo) if e.message["role"] == "assistant")
    assert page.locator("#integrity").inner_text().startswith("Verified.")
    rows = page.locator("#timeline tbody tr")
    assert rows.count() == len(events)
    kinds = page.locator("#timeline .kind").all_text_contents()
    assert kinds == [e.kind for e in events]
    assert {"Started", "MessageAppended", "ThresholdReached", "SummaryCreated"} <= set(kinds)
    assert page.locator("#summaries tbody tr").count() == len(summaries)
    assert page.locator("#chart circle.pt").count() == turns
    assert page.locator("#chart line.mark").count() == len(summaries)
    _screenshot(page, "viewer-conversation.png", tmp_path)


def test_picking_a_version_shows_exactly_the_context_the_model_was_sent_then(
    server: str, store: Store, page: Page, tmp_path: Path
) -> None:
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        first = ledger.summaries(store.demo)[0]
        version = min(first.version + 9, ledger.conversation(store.demo).version)
        expected = ledger.working_memory(store.demo, version=version)
        before = ledger.context(store.demo, version=version - 1)
    page.goto(f"{server}/conversations/{store.demo}")
    page.fill("#version", str(version))
    page.click("form.version button")
    page.wait_for_url(f"**/context?version={version}")
    assert page.locator("#shown-version").inner_text() == str(version)
    assert _context_shown(page) == [_as_shown(m) for m in expected.messages]
    assert page.locator("#prompt-tokens").inner_text() == f"{expected.tokens:,}"
    assert any("Summary of the earlier conversation" in (m["content"] or "") for m in _context_shown(page))
    _screenshot(page, "viewer-context.png", tmp_path)
    page.click("#prev")
    page.wait_for_url(f"**/context?version={version - 1}")
    assert _context_shown(page) == [_as_shown(m) for m in before]


def test_a_script_in_a_message_is_shown_as_text_and_never_runs(
    server: str, store: Store, page: Page
) -> None:
    for path in (f"/conversations/{store.hostile}", f"/conversations/{store.hostile}/context"):
        page.goto(server + path)
        assert SCRIPT_MESSAGE in page.locator("main").inner_text()
        assert page.evaluate("window.__pwned === undefined")
        assert page.locator("main script, main img").count() == 0
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_a_tampered_store_shows_where_the_log_was_altered(
    tampered: tuple[str, int, int], store: Store, page: Page
) -> None:
    base, position, version = tampered
    page.goto(f"{base}/conversations/{store.demo}")
    integrity = page.locator("#integrity")
    assert "broken" in (integrity.get_attribute("class") or "")
    assert integrity.inner_text().startswith("Integrity check failed")
    assert page.locator("#broken-position").inner_text() == str(position)
    assert f"message {position} does not match its digest" in integrity.inner_text()
    assert "ev-broken" in (page.locator(f"#v{version}").get_attribute("class") or "")


# -------------------------------------------------------------- JSON over HTTP


def test_the_list_as_json_is_searchable_and_paginated(server: str, store: Store) -> None:
    status, kind, data = _get(server + "/conversations.json")
    assert status == 200 and kind.startswith("application/json")
    assert data["total"] == 4 and data["page"] == 1 and data["pages"] == 1
    assert {c["id"] for c in data["conversations"]} == {
        str(store.demo), str(store.hostile), *map(str, store.others)}
    demo = next(c for c in data["conversations"] if c["id"] == str(store.demo))
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        totals = ledger.totals(store.demo)
    assert (demo["messages"], demo["summaries"], demo["context_tokens"]) == (
        totals.messages, totals.summaries, totals.context_tokens)
    _, _, found = _get(server + f"/conversations?format=json&q={str(store.demo)[:8]}")
    assert [c["id"] for c in found["conversations"]] == [str(store.demo)]
    _, _, beyond = _get(server + "/conversations.json?page=9")
    assert beyond["conversations"] == [] and beyond["page"] == 9


def test_a_conversation_as_json_has_its_events_integrity_and_turns(server: str, store: Store) -> None:
    status, _, data = _get(f"{server}/conversations/{store.demo}.json")
    assert status == 200
    _, _, same = _get(f"{server}/conversations/{store.demo}?format=json")
    assert same == data
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        events = list(ledger.replay(store.demo))
        summaries = ledger.summaries(store.demo)
    assert [e["version"] for e in data["events"]] == [e.version for e in events]
    assert data["integrity"]["verified"] is True and data["integrity"]["problems"] == []
    assert [s["through_position"] for s in data["summaries"]] == [s.through_position for s in summaries]
    assert data["summaries"][0]["model"] == summaries[0].model
    assert all(t["sent_tokens"] <= t["full_history_tokens"] for t in data["turns"])
    assert len(data["summary_marks"]) == len(summaries)


def test_the_context_as_json_equals_the_ledgers_context_at_that_version(server: str, store: Store) -> None:
    with Ledger.open(store.url, run_policy=False, settings=IN_CLEAR) as ledger:
        latest = ledger.conversation(store.demo).version
        wanted = {v: ledger.working_memory(store.demo, version=v) for v in (1, 40, latest)}
    for version, memory in wanted.items():
        status, _, data = _get(f"{server}/conversations/{store.demo}/context.json?version={version}")
        assert status == 200
        assert [m["message"] for m in data["messages"]] == memory.messages
        assert (data["version"], data["tokens"], data["latest_version"]) == (version, memory.tokens, latest)
    _, _, now = _get(f"{server}/conversations/{store.demo}/context?format=json")
    assert now["version"] == latest


def test_the_tampered_store_as_json_names_the_first_broken_position(
    tampered: tuple[str, int, int], store: Store
) -> None:
    base, position, version = tampered
    _, _, data = _get(f"{base}/conversations/{store.demo}.json")
    assert data["integrity"]["verified"] is False
    assert data["integrity"]["first_problem"] == {
        "version": version, "position": position,
        "problem": f"message {position} does not match its digest"}


def test_html_pages_escape_content_and_unknown_things_are_not_found(server: str, store: Store) -> None:
    _, kind, body = _get(f"{server}/conversations/{store.hostile}/context")
    assert kind.startswith("text/html")
    assert "<script>window.__pwned" not in body and "&lt;script&gt;window.__pwned" in body
    assert _get(f"{server}/conversations/not-an-id")[0] == 404
    status, _, missing = _get(f"{server}/conversations/{store.demo.hex[::-1]}.json")
    assert status == 404 and "no such conversation" in missing["error"]
    assert _get(f"{server}/conversations/{store.demo}/context.json?version=99999")[0] == 404
    assert _get(f"{server}/conversations/{store.demo}/context.json?version=zero")[0] == 400


def test_only_get_is_served(server: str) -> None:
    request = urllib.request.Request(server + "/conversations", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as caught:
        urllib.request.urlopen(request, timeout=30)
    assert caught.value.code == 405


# ------------------------------------------------------------------ the command


def test_serve_without_the_web_extra_says_how_to_install_it(store: Store) -> None:
    code = (
        "import sys; sys.modules['starlette'] = None\n"
        "from contextledger.infrastructure.cli import main\n"
        f"raise SystemExit(main(['serve', '--database', {store.url!r}]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=offline_env())
    assert done.returncode == 2
    assert "pip install 'contextledger[web]'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_serve_refuses_a_sqlite_file_that_does_not_exist(tmp_path: Path) -> None:
    missing = tmp_path / "nothing.db"
    done = subprocess.run(
        [sys.executable, "-m", "contextledger.infrastructure.cli", "serve", "--database",
         f"sqlite:///{missing}"], capture_output=True, text=True, timeout=60, env=offline_env())
    assert done.returncode == 2 and "no database at" in done.stderr
    assert not missing.exists()


def test_the_core_and_the_command_line_never_import_the_viewer() -> None:
    code = (
        "import sys, contextledger, contextledger.infrastructure.cli as cli\n"
        "cli.build_parser()\n"
        "loaded = [m for m in sys.modules if m.startswith(('starlette', 'jinja2', 'uvicorn', "
        "'contextledger.infrastructure.web'))]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=offline_env())
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def edited_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Any, Any]]:
    """A store with a conversation that was retracted from and edited (a summary
    invalidated by it) and a fork of it; yields the base URL, the source and the fork."""
    from contextledger import ReductionPolicy
    from contextledger.testing import ScriptedSummarizer

    folder = tmp_path_factory.mktemp("edited")
    url = f"sqlite:///{folder / 'ledger.db'}"
    with Ledger.open(url, summarizer=ScriptedSummarizer()) as ledger:
        cid = ledger.start("You help.", policy=ReductionPolicy(trigger_messages=4, keep_messages=2))
        for turn in range(4):
            ledger.append(cid, {"role": "user", "content": f"question {turn}"})
            ledger.append(cid, {"role": "assistant", "content": f"answer {turn}"})
        assert ledger.wait_idle(30)
        ledger.retract(cid, 0, reason="asked to forget")
        ledger.edit(cid, 7, {"role": "assistant", "content": "answer 3, corrected"})
        fork = ledger.fork(cid)
    with serve_forked("sqlite:///ledger.db", cwd=folder) as base:
        yield base, cid, fork


def test_retracted_and_edited_messages_invalidated_summaries_and_fork_origins_are_shown(
    edited_server: tuple[str, Any, Any], page: Page, tmp_path: Path
) -> None:
    base, cid, fork = edited_server
    page.goto(f"{base}/conversations/{fork}")
    assert f"Forked from {cid}" in page.locator("#fork-origin").inner_text()
    page.click("#fork-source")
    page.wait_for_url(f"**/conversations/{cid}")
    retracted = page.locator("tr.ev-retracted").first
    assert "retracted at version" in retracted.inner_text() and "asked to forget" in retracted.inner_text()
    decoration = retracted.locator(".content").evaluate("el => getComputedStyle(el).textDecorationLine")
    assert decoration == "line-through"
    assert "replaced by the edit at version" in page.locator("tr.ev-replaced").first.inner_text()
    edit = page.locator("tr.ev-MessageEdited").first.inner_text()
    assert "edit of version" in edit and "answer 3" in edit and "answer 3, corrected" in edit
    assert "invalidated" in page.locator("#summaries tr.summary-invalid").first.inner_text()
    _screenshot(page, "viewer-edits.png", tmp_path)
    page.goto(f"{base}/conversations")
    assert page.locator("#conversations a.cid").count() == 2
    assert "fork of" in page.locator("#conversations").inner_text()
