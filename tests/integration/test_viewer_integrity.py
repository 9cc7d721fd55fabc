"""The viewer on a damaged store (real SQLite files and PostgreSQL schemas edited
behind the ledger's back): a page that needs a damaged log (the conversation, its
context, the list) answers 200 with every problem verify finds, never 500; the verify
pages list the problems per conversation, as HTML and JSON."""

from __future__ import annotations

import warnings

import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    from starlette.testclient import TestClient

from contextledger.infrastructure.web import create_app
from tests.support.raw_store import APPENDED, Store, build_store


@pytest.fixture
def store(shared_url: str) -> Store:
    return build_store(shared_url)


def test_a_conversation_with_an_undecodable_event_shows_its_problems_not_a_server_error(
    store: Store,
) -> None:
    rows = store.raw.rows("events", store.damaged)
    snapshots = {v for v, _, _ in store.raw.rows("snapshots", store.damaged)}
    version = next(v for v, t, _ in reversed(rows) if t == APPENDED and v not in snapshots)
    (state,) = [s for v, _, s in rows if v == version]
    store.raw.set_state("events", store.damaged, version, state[: len(state) // 3])
    with store.open() as ledger:
        client = TestClient(create_app(ledger))
        page = client.get(f"/conversations/{store.damaged}.json")
        assert page.status_code == 200
        data = page.json()
        assert data["verified"] is False and "cannot decode" in data["damage"]
        first = data["problems"][0]
        assert first["version"] == version and first["problem"].startswith("undecodable event")
        html = client.get(f"/conversations/{store.damaged}")
        assert html.status_code == 200
        assert "Integrity check failed" in html.text and f"version {version}: undecodable event" in html.text

        everything = client.get("/verify.json")
        assert everything.status_code == 200
        found = everything.json()
        assert found["conversations"] == 2 and found["verified"] is False
        assert [c["conversation_id"] for c in found["by_conversation"]] == [str(store.damaged)]
        assert client.get("/verify").status_code == 200

        for other in ("/conversations.json", f"/conversations/{store.damaged}/context.json"):
            shown = client.get(other)  # pages that load the conversation show its problems too
            assert shown.status_code == 200 and shown.json()["conversation_id"] == str(store.damaged)
            assert shown.json()["problems"][0]["version"] == version
        assert client.get(f"/conversations/{store.damaged}/context").status_code == 200

        fine = client.get(f"/conversations/{store.fine}/verify.json").json()
        assert fine["verified"] is True and fine["problems"] == []
        assert client.get(f"/conversations/{store.fine}").status_code == 200


def test_a_deleted_started_and_an_edited_snapshot_are_listed_on_the_conversation_page(store: Store) -> None:
    version = store.raw.rows("snapshots", store.damaged)[-1][0]
    store.raw.edit("snapshots", store.damaged, version,
                   lambda d: d["state"].update(system_prompt="You are EVIL."))
    store.raw.delete("events", store.damaged, 1)
    with store.open() as ledger:
        client = TestClient(create_app(ledger))
        page = client.get(f"/conversations/{store.damaged}.json")
        assert page.status_code == 200
        problems = page.json()["problems"]
        assert problems[0]["version"] == 1 and "first event" in problems[0]["problem"]
        assert any("cannot be checked" in p["problem"] for p in problems)
        assert client.get(f"/conversations/{store.damaged}").status_code == 200
