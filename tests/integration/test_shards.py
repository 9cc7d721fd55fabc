"""Several stores (shards): conversations routed by a stable hash of their id, the
placement recorded in the first store, every operation of the public API working
across stores, and a store added to a running deployment moving nothing.

On SQLite files and on PostgreSQL (one schema per store, like separate databases)."""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from uuid import UUID

import pytest

import contextledger as cl
from contextledger.application.shared.addressing import id_for_key
from contextledger.application.storage.sharding import home_store
from tests.conftest import POSTGRES_URL, _postgres_admin

StoreFactory = Callable[[int], list[str]]


@pytest.fixture(params=["sqlite", "postgres"])
def make_stores(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """``make_stores(n)``: n more store URLs (fresh SQLite files or PostgreSQL schemas)."""
    made: list[str] = []
    admin = _postgres_admin() if request.param == "postgres" else None

    def make(n: int) -> list[str]:
        urls = []
        for _ in range(n):
            name = f"s{len(made)}_{uuid.uuid4().hex[:10]}"
            if admin is None:
                url = f"sqlite:///{tmp_path / (name + '.db')}"
            else:
                admin.execute(f'CREATE SCHEMA "{name}"')  # type: ignore[attr-defined]
                url = f"{POSTGRES_URL.split('?')[0]}?schema={name}"
            made.append(url)
            urls.append(url)
        return urls

    try:
        yield make
    finally:
        if admin is not None:
            for url in made:
                admin.execute(f'DROP SCHEMA "{url.rsplit("=", 1)[1]}" CASCADE')  # type: ignore[attr-defined]
            admin.close()  # type: ignore[attr-defined]


def open_ledger(urls: list[str], **kwargs: object) -> cl.Ledger:
    return cl.Ledger.open(urls, run_policy=False, **kwargs)  # type: ignore[arg-type]


def holder(ledger: cl.Ledger, cid: UUID) -> list[int]:
    """The indexes of the stores whose own log holds the conversation's events."""
    return [
        i for i, shard in enumerate(ledger.shards)
        if list(shard.local_store.app.events.get(cid, lte=1))
    ]


def id_homed(stores: int, index: int, prefix: str = "k") -> str:
    """A key whose conversation id hashes to store ``index`` of ``stores``."""
    n = 0
    while home_store(id_for_key(f"{prefix}{n}"), stores) != index:
        n += 1
    return f"{prefix}{n}"


def test_conversations_spread_and_each_is_whole_in_its_home_store(make_stores: StoreFactory) -> None:
    urls = make_stores(2)
    with open_ledger(urls) as ledger:
        assert len(ledger.shards) == 2
        ids = [ledger.start("be brief") for _ in range(24)]
        for n, cid in enumerate(ids):
            ledger.append(cid, {"role": "user", "content": f"question {n}"})
            ledger.append(cid, {"role": "assistant", "content": f"answer {n}"}, client_message_id=f"a{n}")
        places = {cid: holder(ledger, cid) for cid in ids}
        assert all(places[cid] == [home_store(cid, 2)] for cid in ids)
        assert set(Counter(p[0] for p in places.values())) == {0, 1}
        assert sorted(ledger.conversation_ids()) == sorted(ids)
        report = ledger.verify()
        assert report.ok and report.conversations == 24 and report.messages == 48
        assert ledger.totals().conversations == 24
        for n, cid in enumerate(ids):
            assert [m["content"] for m in ledger.context(cid)][-2:] == [f"question {n}", f"answer {n}"]
            assert next(e.kind for e in ledger.replay(cid)) == "Started"
            # a retried append with the same client id returns the first position
            assert ledger.append(cid, {"role": "assistant", "content": f"answer {n}"}, client_message_id=f"a{n}") == 1
    # Another process (a fresh ledger) finds each one from the recorded placements.
    with open_ledger(urls) as again:
        for n, cid in enumerate(ids):
            assert again.transcript(cid)[-1].message["content"] == f"answer {n}"


def test_keys_route_like_ids_and_get_or_start_is_safe_across_ledgers(make_stores: StoreFactory) -> None:
    urls = make_stores(2)
    a, b = open_ledger(urls), open_ledger(urls)
    try:
        found: list[UUID] = []
        barrier = threading.Barrier(8)

        def worker(ledger: cl.Ledger) -> None:
            barrier.wait()
            found.append(ledger.get_or_start("chat-7", system_prompt="hi"))

        threads = [threading.Thread(target=worker, args=(x,)) for x in (a, b) * 4]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(found) == 8 and set(found) == {id_for_key("chat-7")}  # every thread got it
        assert holder(a, id_for_key("chat-7")) == [home_store(id_for_key("chat-7"), 2)]
        with pytest.raises(cl.DuplicateConversationError):
            b.start(key="chat-7")
        a.append("chat-7", {"role": "user", "content": "by key"})
        assert b.context("chat-7")[-1]["content"] == "by key"
    finally:
        a.close()
        b.close()


def test_a_fork_lives_in_its_own_store_and_reads_its_source_in_another(make_stores: StoreFactory) -> None:
    urls = make_stores(2)
    with open_ledger(urls) as ledger:
        source = ledger.start("sys", key=id_homed(2, 0, "src"))
        for n in range(5):
            ledger.append(source, {"role": "user", "content": f"m{n}"})
        fork = ledger.fork(source, key=id_homed(2, 1, "fork"), version=4)
        assert holder(ledger, source) == [0] and holder(ledger, fork) == [1]
        ledger.append(fork, {"role": "user", "content": "only in the fork"})
        contents = [e.message["content"] for e in ledger.transcript(fork)]
        assert contents == ["m0", "m1", "m2", "only in the fork"]
        assert ledger.verify(fork).ok and ledger.verify().ok


def test_a_store_added_later_moves_nothing_and_new_conversations_spread_over_all(
    make_stores: StoreFactory,
) -> None:
    first = make_stores(2)
    with open_ledger(first) as ledger:
        old = [ledger.start("old") for _ in range(20)]
        for cid in old:
            ledger.append(cid, {"role": "user", "content": "before"})
        keyed = ledger.get_or_start(id_homed(2, 1, "old-key"))
        where = {cid: holder(ledger, cid) for cid in [*old, keyed]}
    grown = [*first, *make_stores(1)]
    with open_ledger(grown) as ledger:
        for cid in old:
            ledger.append(cid, {"role": "user", "content": "after"})
            assert [m["content"] for m in ledger.context(cid)][-2:] == ["before", "after"]
            assert holder(ledger, cid) == where[cid]
        assert ledger.get_or_start(id_homed(2, 1, "old-key")) == keyed and holder(ledger, keyed) == where[keyed]
        with pytest.raises(cl.DuplicateConversationError):
            ledger.start(key=id_homed(2, 1, "old-key"))
        new = [ledger.start("new") for _ in range(60)]
        counts = Counter(holder(ledger, cid)[0] for cid in new)
        assert sorted(counts) == [0, 1, 2]
        assert all(holder(ledger, cid) == [home_store(cid, 3)] for cid in new)
        assert sorted(ledger.conversation_ids()) == sorted([*old, keyed, *new])
        assert ledger.verify().ok
        on_new_store = next(cid for cid in new if home_store(cid, 3) == 2)
    # A process still given the old list says where the conversation is, not "not found".
    with open_ledger(first) as stale:
        with pytest.raises(cl.StoreError, match="placed in store 2"):
            stale.context(on_new_store)
        assert stale.context(old[0])[-1]["content"] == "after"


def test_one_store_becomes_several_and_its_conversations_stay_in_the_first(
    make_stores: StoreFactory,
) -> None:
    first = make_stores(1)
    with cl.Ledger.open(first[0], run_policy=False) as single:
        assert single.shards == [single] and single.store is single.local_store
        before = [single.start("one store") for _ in range(6)]
        keyed = single.get_or_start(id_homed(2, 1, "legacy"))
    with open_ledger([*first, *make_stores(1)]) as ledger:
        for cid in [*before, keyed]:
            ledger.append(cid, {"role": "user", "content": "still here"})
            assert holder(ledger, cid) == [0]
        # A key started before sharding is not started again in its hashed store.
        with pytest.raises(cl.DuplicateConversationError):
            ledger.start(key=id_homed(2, 1, "legacy"))
        assert ledger.get_or_start(id_homed(2, 1, "legacy")) == keyed
        assert holder(ledger, keyed) == [0]


def test_the_policy_summarizes_in_every_store(make_stores: StoreFactory) -> None:
    urls = make_stores(2)
    policy = cl.ReductionPolicy(trigger_messages=6, keep_messages=2)
    with cl.Ledger.open(urls) as ledger:  # type: ignore[arg-type]
        ids = [ledger.start("sys", policy=policy, key=id_homed(2, i, f"p{i}-")) for i in (0, 1)]
        for cid in ids:
            for n in range(8):
                ledger.append(cid, {"role": "user", "content": f"message number {n} of {cid}"})
        assert ledger.wait_idle(60)
        for cid in ids:
            assert ledger.summaries(cid), "each store's own runner summarized its conversation"
        assert [holder(ledger, cid) for cid in ids] == [[0], [1]]


def test_store_settings_are_checked(tmp_path: Path) -> None:
    a, b = f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"
    s = cl.Settings(stores=(a, b))
    assert s.database_url == a and s.store_urls == (a, b)
    assert cl.Settings.from_env({"CONTEXTLEDGER_STORES": f"{a}, {b}"}).store_urls == (a, b)
    assert cl.Settings.from_env({"CONTEXTLEDGER_STORES": f"{a}\n{b}"}).store_urls == (a, b)
    with pytest.raises(cl.ConfigurationError, match="twice"):
        cl.Settings(stores=(a, a))
    with pytest.raises(cl.ConfigurationError, match="first of stores"):
        cl.Settings(stores=(a, b), database_url=b)
    with pytest.raises(cl.ConfigurationError):
        cl.Ledger.open([])


def test_a_bad_later_store_fails_the_open_before_any_store_is_created(tmp_path: Path) -> None:
    a = f"sqlite:///{tmp_path / 'a.db'}"
    with pytest.raises(cl.ConfigurationError):
        cl.Ledger.open([a, f"sqlite:///{tmp_path / 'missing' / 'b.db'}"])
    with pytest.raises(cl.ConfigurationError):
        cl.Ledger.open([a, "mysql://nowhere/db"])
    assert list(tmp_path.iterdir()) == []


def test_each_store_keeps_its_own_read_models(make_stores: StoreFactory) -> None:
    urls = make_stores(2)
    with open_ledger(urls) as ledger:
        first = cl.attach_read_models(ledger)
        ids = [ledger.start("sys", key=id_homed(2, i % 2, f"rm{i}-")) for i in range(4)]
        for cid in ids:
            ledger.append(cid, {"role": "user", "content": "hello"})
        assert ledger.wait_idle(60)
        second = cl.SQLReadModels.for_ledger(ledger.shards[1])
        try:
            listed = [
                sorted(r.conversation_id for r in models.conversations.conversations())
                for models in (first, second)
            ]
        finally:
            second.close()
        assert listed == [sorted(ids[0::2]), sorted(ids[1::2])]
