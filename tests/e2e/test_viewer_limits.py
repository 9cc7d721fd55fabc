"""``contextledger serve`` at its edges, as a real subprocess over HTTP and a real
headless Chromium: the pages fit a 1280 px window."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import ConsoleMessage, sync_playwright

from tests.support.viewer import CHROMIUM, CHROMIUM_ARGS, Store, build_store, serve


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
