"""``contextledger serve`` at its edges, as a real subprocess over HTTP (and a real
headless Chromium for layout): conversations addressed by key, bad query parameters,
security headers on every response, a 20,000-message conversation's page staying
small, the list fitting a 1280 px window, and the warning when the viewer is exposed."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, sync_playwright

from contextledger import Ledger
from tests.support.viewer import (
    CHROMIUM,
    CHROMIUM_ARGS,
    KEY,
    Store,
    build_store,
    offline_env,
    serve_forked,
)

#: The application key of the long conversation the module's store also holds.
LONG = "long-1"


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """The viewer's store, and beside its conversations (in clear) one of 20,000
    messages (``LONG``) under the default settings, each record encrypted under its
    subject's key, written in one ``extend``: one server serves them all."""
    store = build_store(tmp_path_factory.mktemp("limits") / "ledger.db", messages=130)
    with Ledger.open(store.url, run_policy=False) as ledger:
        cid = ledger.start("You help.", key=LONG)
        ledger.extend(cid, [
            {"role": "user" if n % 2 == 0 else "assistant", "content": f"message {n} of a long chat"}
            for n in range(20_000)])
    return store


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[str]:
    with serve_forked(store.served_url, cwd=store.path.parent) as base:
        yield base


def _fetch(url: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(url, method=method, data=b"" if method == "POST" else None)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}, response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read()


def _json(url: str) -> tuple[int, Any]:
    status, _, body = _fetch(url)
    return status, json.loads(body)


# ------------------------------------------------------------------------- keys


def test_a_conversation_is_reached_by_its_key_in_pages_and_json(server: str, store: Store) -> None:
    keyed = store.others[0]
    by_id = _json(f"{server}/conversations/{keyed}.json")
    by_key = _json(f"{server}/conversations/{KEY}.json")
    assert by_key == by_id and by_key[0] == 200
    assert by_key[1]["conversation"]["key"] == KEY
    assert _json(f"{server}/conversations/{KEY}?format=json") == by_id
    assert _json(f"{server}/conversations/{KEY}/context.json") == _json(
        f"{server}/conversations/{keyed}/context.json")
    status, _, page = _fetch(f"{server}/conversations/{KEY}")
    assert status == 200 and str(keyed).encode() in page
    status, _, context = _fetch(f"{server}/conversations/{KEY}/context?version=2")
    assert status == 200 and b"A short billing question." in context


def test_an_unknown_key_is_a_404_naming_it_and_a_malformed_one_a_400(server: str) -> None:
    status, body = _json(f"{server}/conversations/no-such-chat.json")
    assert status == 404 and "no such conversation with key 'no-such-chat'" in body["error"]
    status, _, page = _fetch(f"{server}/conversations/no-such-chat/context")
    assert status == 404 and b"no such conversation with key &#39;no-such-chat&#39;" in page
    status, body = _json(f"{server}/conversations/{'k' * 201}.json")
    assert status == 400 and "1 to 200 characters" in body["error"]


# ------------------------------------------------------------- query parameters


BAD_WHOLE_NUMBERS = ["1e23", "-1", "0", "abc", "99999999999999999999999", str(2**63), "true", "false",
                     "1.5", "0x10", "1_0", "+3", "\u0665"]


@pytest.mark.parametrize("path,name", [
    ("/conversations/{cid}/context.json", "version"),
    ("/conversations/{cid}/context.json", "page"),
    ("/conversations/{cid}/context.json", "per_page"),
    ("/conversations/{cid}.json", "page"),
    ("/conversations/{cid}.json", "per_page"),
    ("/conversations.json", "page"),
])
def test_a_bad_number_in_a_query_is_a_400_naming_the_parameter(
    server: str, store: Store, path: str, name: str
) -> None:
    url = server + path.format(cid=store.demo)
    for value in BAD_WHOLE_NUMBERS:
        status, body = _json(f"{url}?{name}={urllib.parse.quote(value)}")
        assert status == 400, (name, value, body)
        assert body["error"].startswith(f"{name} must be"), body


def test_other_bad_parameters_are_400s_and_big_versions_404s(server: str, store: Store) -> None:
    base = f"{server}/conversations/{store.demo}"
    assert _json(f"{base}.json?per_page=1001")[0] == 400
    status, body = _json(f"{base}.json?format=xml")
    assert status == 400 and "format must be html or json" in body["error"]
    status, _, page = _fetch(f"{server}/conversations?q={'x' * 201}")
    assert status == 400 and b"q must be at most 200 characters" in page
    status, body = _json(f"{base}/context.json?version={2**63 - 1}")
    assert status == 404 and "past the latest version" in body["error"]


# ---------------------------------------------------------------- security headers


def test_every_response_carries_the_security_headers(server: str, store: Store) -> None:
    routes = [
        ("GET", "/", 200), ("GET", "/conversations", 200), ("GET", "/conversations.json", 200),
        ("GET", f"/conversations/{store.demo}", 200), ("GET", f"/conversations/{store.demo}.json", 200),
        ("GET", f"/conversations/{KEY}.json", 200),
        ("GET", f"/conversations/{store.demo}/context", 200),
        ("GET", f"/conversations/{store.demo}/context.json?version=3", 200),
        ("GET", "/static/style.css", 200), ("HEAD", "/conversations", 200),
        ("GET", "/nowhere", 404), ("GET", "/conversations/no-such-chat", 404),
        ("GET", f"/conversations/{store.demo}/context.json?version=zero", 400),
        ("GET", "/conversations.json?page=abc", 400), ("POST", "/conversations", 405),
        ("GET", "/static/nothing.css", 404),
    ]
    for method, path, expected in routes:
        status, headers, _ = _fetch(server + path, method)
        assert status == expected, (method, path, status)
        policy = headers["content-security-policy"]
        assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy, path
        assert "unsafe-inline" not in policy and "script-src" not in policy, path
        assert headers["x-content-type-options"] == "nosniff", path
        assert headers["x-frame-options"] == "DENY", path
        assert headers["referrer-policy"] == "no-referrer", path
        wanted = "public, max-age=3600" if path == "/static/style.css" else "no-store"
        assert headers["cache-control"] == wanted, path


# ------------------------------------------------------------- layout in Chromium


def test_the_pages_fit_a_1280_px_window_and_break_no_security_policy(server: str, store: Store) -> None:
    paths = ["/conversations", f"/conversations/{store.demo}", f"/conversations/{store.demo}/context"]
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            page = context.new_page()
            problems: list[str] = []

            def on_console(message: ConsoleMessage) -> None:
                # What the browser refused under the policy (a missing favicon is not that).
                if "Content Security Policy" in message.text or "Refused to" in message.text:
                    problems.append(message.text)

            page.on("console", on_console)
            for path in paths:
                page.goto(server + path)
                assert page.locator("#conversations th").count() > 0 or path != "/conversations"
                width = page.evaluate("document.documentElement.scrollWidth")
                assert width <= 1280, f"{path} is {width} px wide in a 1280 px window"
                for table in page.locator("main table").all():
                    fits = table.evaluate("t => t.scrollWidth <= t.parentElement.clientWidth")
                    assert fits, f"a table of {path} is wider than its column"
                # The stylesheet applied under the content security policy.
                colour = page.locator("header.top").evaluate("h => getComputedStyle(h).backgroundColor")
                assert colour == "rgb(29, 35, 48)"
            assert problems == []
        finally:
            browser.close()


# ------------------------------------------------------------ a long conversation


def test_a_20000_message_conversation_is_served_a_page_at_a_time(server: str) -> None:
    base = f"{server}/conversations/{LONG}"
    status, _, page = _fetch(base)
    assert status == 200 and len(page) < 1_000_000, len(page)
    assert page.count(b'<tr id="v') == 250 and b'rel="next" href="/conversations/' in page
    status, _, raw = _fetch(base + ".json")
    assert status == 200 and len(raw) < 1_000_000, len(raw)
    data = json.loads(raw)
    assert [e["version"] for e in data["events"]] == list(range(1, 251))
    assert data["conversation"]["messages"] == 20_000 and data["turns_total"] == 10_000
    assert len(data["turns"]) <= 120 and data["turns"][-1]["turn"] == 10_000
    timeline = data["timeline"]
    total = data["conversation"]["version"]  # the messages, the start, the threshold events
    assert total > 20_000 and timeline["total"] == total
    assert (timeline["page"], timeline["pages"], timeline["prev"]) == (1, -(-total // 250), None)
    status, second = _json(server + timeline["next"])
    assert status == 200 and [e["version"] for e in second["events"]] == list(range(251, 501))
    status, last = _json(server + second["timeline"]["last"])
    assert status == 200 and [e["version"] for e in last["events"]] == list(range(20_001, total + 1))
    assert last["timeline"]["next"] is None and last["timeline"]["prev"].endswith("?page=80")
    status, tail = _json(f"{base}.json?page=21&per_page=1000")
    assert [e["version"] for e in tail["events"]] == list(range(20_001, total + 1))
    status, _, context = _fetch(base + "/context")
    assert status == 200 and len(context) < 1_000_000, len(context)
    status, shown = _json(base + "/context.json?page=2&per_page=100")
    assert status == 200 and shown["messages_page"]["total"] > 1_000
    status, wider = _json(base + "/context.json?per_page=200")
    assert shown["messages"] == wider["messages"][100:]


# ------------------------------------------------------------------ the command


def test_serving_beyond_this_machine_warns_that_there_is_no_authentication(store: Store) -> None:
    for host, warned in (("0.0.0.0", True), ("127.0.0.1", False)):
        process = subprocess.Popen(
            [sys.executable, "-m", "contextledger.infrastructure.cli", "serve",
             "--database", store.served_url, "--host", host, "--port", "0"],
            cwd=store.path.parent, env=offline_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert process.stderr is not None
            announced = process.stderr.readline()
            assert f" at http://{host}:" in announced
            port = announced.split(f"http://{host}:", 1)[1].split("/")[0]
            # Once a request is answered, everything printed before serving is out.
            assert _fetch(f"http://127.0.0.1:{port}/conversations.json")[0] == 200
        finally:
            process.terminate()
            process.wait(timeout=30)
        rest = process.stderr.read()  # the buffered reader: it may hold lines already
        process.stderr.close()
        assert process.stdout is not None
        process.stdout.close()
        lines = [line for line in rest.splitlines() if "warning" in line]
        if warned:
            assert len(lines) == 1, rest
            assert "no authentication" in lines[0] and host in lines[0]
        else:
            assert lines == [], rest
