"""``contextledger serve`` at its edges, as a real subprocess over HTTP (and a real
headless Chromium for layout): security headers on every response, the pages fitting
a 1280 px window, and the warning when the viewer is exposed beyond this machine."""

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

from tests.support.viewer import CHROMIUM, CHROMIUM_ARGS, Store, build_store, offline_env, serve


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Store:
    return build_store(tmp_path_factory.mktemp("limits") / "ledger.db", messages=130)


@pytest.fixture(scope="module")
def server(store: Store) -> Iterator[str]:
    with serve(store.served_url, cwd=store.path.parent) as base:
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


# ---------------------------------------------------------------- security headers


def test_every_response_carries_the_security_headers(server: str, store: Store) -> None:
    routes = [
        ("GET", "/", 200), ("GET", "/conversations", 200), ("GET", "/conversations.json", 200),
        ("GET", f"/conversations/{store.demo}", 200), ("GET", f"/conversations/{store.demo}.json", 200),
        ("GET", f"/conversations/{store.demo}/context", 200),
        ("GET", f"/conversations/{store.demo}/context.json?version=3", 200),
        ("GET", "/static/style.css", 200), ("HEAD", "/conversations", 200),
        ("POST", "/conversations", 405), ("GET", "/nowhere", 404), ("GET", "/conversations/no-such-chat", 404),
        ("GET", f"/conversations/{store.demo}/context.json?version=zero", 400),
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
