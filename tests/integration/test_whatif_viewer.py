"""The viewer's what-if page (Starlette's TestClient): it renders both sides and the
SVG chart of tokens per turn, answers JSON, rejects a bad policy with 400 and writes
nothing to the store."""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlencode

import pytest

with warnings.catch_warnings():
    # Starlette's TestClient announces a move to another HTTP client; httpx still works.
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

import contextledger as cl
from contextledger.infrastructure.web import create_app
from tests.integration.test_whatif import RECORDED, record
from tests.properties.test_corpora import load

CANDIDATE = {"trigger_messages": 20, "keep_messages": 6}


@pytest.fixture(scope="module")
def ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[cl.Ledger]:
    path = tmp_path_factory.mktemp("viewer") / "store.db"
    with cl.Ledger.open(f"sqlite:///{path}") as recording:
        record(recording, load("plain/sgd_plain.jsonl")[:2], RECORDED)
    # As the viewer opens a store given by its URL: read-only.
    with cl.Ledger.open(f"sqlite:///{path}", read_only=True) as opened:
        yield opened


@pytest.fixture
def client(ledger: cl.Ledger) -> TestClient:
    return TestClient(create_app(ledger))


def query(**params: object) -> str:
    return urlencode({k: json.dumps(v) if isinstance(v, dict) else v for k, v in params.items()})


def test_the_form_renders_without_a_policy(client: TestClient) -> None:
    page = client.get("/whatif")
    assert page.status_code == 200
    assert '<form class="whatif"' in page.text and 'id="whatif-chart"' not in page.text


def test_the_page_renders_both_sides_and_the_chart(client: TestClient, ledger: cl.Ledger) -> None:
    top = ledger.recorder.max_notification_id()
    page = client.get(f"/whatif?{query(policy=CANDIDATE)}")
    data = client.get(f"/whatif.json?{query(policy=CANDIDATE, conversations='chat-1')}").json()
    assert ledger.recorder.max_notification_id() == top
    assert page.status_code == 200
    html = page.text
    assert '<svg id="whatif-chart"' in html
    assert 'id="recorded-line"' in html and 'id="simulated-line"' in html
    assert html.count('class="mark"') >= 2  # where each of the two conversations begins
    assert 'id="figures"' in html and "prefix-stable turns" in html and 'id="differences"' in html
    assert "chat-0" in html and "chat-1" in html
    assert data["policy"] == CANDIDATE and data["complete"] is True
    assert [c["key"] for c in data["conversations"]] == ["chat-1"]
    assert data["simulated"]["turns"] == data["recorded"]["turns"] > 0


@pytest.mark.parametrize(
    ("policy", "reason"),
    [
        ("{not json", "the policy is not JSON"),
        ("[1]", "must be a JSON object"),
        (json.dumps({"trigger_messages": 5, "colour": "red"}), "colour"),
        (json.dumps({"trigger_messages": 5, "keep_messages": 9}), "keep_messages (9) must be smaller"),
    ],
)
def test_a_bad_policy_is_rejected_with_400(client: TestClient, policy: str, reason: str) -> None:
    page = client.get(f"/whatif?{urlencode({'policy': policy})}")
    data = client.get(f"/whatif.json?{urlencode({'policy': policy})}")
    assert page.status_code == 400 and reason in page.text
    assert data.status_code == 400 and reason in data.json()["error"]


def test_an_unknown_conversation_is_404(client: TestClient) -> None:
    page = client.get(f"/whatif?{query(policy=CANDIDATE, conversations='chat-9')}")
    assert page.status_code == 404 and "no such conversation" in page.text


def test_the_chart_fits_its_frame(tmp_path: Path) -> None:
    from contextledger.infrastructure.web.whatif import whatif_chart

    with cl.Ledger.open("memory://") as ledger:
        record(ledger, load("plain/sgd_plain.jsonl")[:1], RECORDED)
        chart = whatif_chart(ledger.simulate(CANDIDATE))
    left, top, right, bottom = chart.plot
    points = [p.split(",") for p in (chart.recorded_line + " " + chart.simulated_line).split()]
    assert chart.turns > 1 and len(points) == 2 * chart.turns
    assert all(left <= float(x) <= right and top <= float(y) <= bottom for x, y in points)
