"""Properties of routing conversations across stores: the home store of an id is
stable and in range, spreads evenly, and every conversation written to a sharded
ledger is found again, by id and by key, after any number of stores are added."""

from __future__ import annotations

import tempfile
import uuid
from collections import Counter
from pathlib import Path
from uuid import UUID

from hypothesis import given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.shared.addressing import id_for_key
from contextledger.application.storage.sharding import home_store

ids = st.uuids()


@given(ids, st.integers(min_value=1, max_value=64))
def test_the_home_store_is_in_range_and_the_same_for_a_copy_of_the_id(cid: UUID, stores: int) -> None:
    index = home_store(cid, stores)
    assert 0 <= index < stores
    assert home_store(UUID(str(cid)), stores) == index
    assert home_store(cid, 1) == 0


@given(st.text(min_size=1, max_size=40).filter(lambda k: k.strip() == k and k.isprintable()))
def test_a_key_routes_like_its_id(key: str) -> None:
    for stores in (2, 3, 5):
        assert home_store(id_for_key(key), stores) == home_store(uuid.uuid5(cl.KEY_NAMESPACE, key), stores)


def test_ids_spread_evenly_over_the_stores() -> None:
    for stores in (2, 3, 4, 8):
        counts = Counter(home_store(uuid.UUID(int=n * 0x9E3779B97F4A7C15 % 2**128), stores) for n in range(8000))
        expected = 8000 / stores
        assert sorted(counts) == list(range(stores))
        assert all(abs(c - expected) < 0.1 * expected for c in counts.values()), counts


def test_routing_does_not_follow_the_workers_split_inside_a_store() -> None:
    # Workers split a store by ``id modulo N``: the store's conversations must not all
    # fall into one worker's share.
    cids = [uuid.UUID(int=n * 0x9E3779B97F4A7C15 % 2**128) for n in range(4000)]
    in_store_0 = [c for c in cids if home_store(c, 2) == 0]
    assert 0.4 < sum(c.int % 2 == 0 for c in in_store_0) / len(in_store_0) < 0.6


@settings(max_examples=8, deadline=None)
@given(
    st.lists(st.one_of(st.uuids().map(str), st.from_regex(r"[a-z]{1,8}", fullmatch=True)),
             min_size=1, max_size=12, unique=True),
    st.lists(st.integers(min_value=1, max_value=2), min_size=1, max_size=3),
)
def test_every_conversation_is_found_after_stores_are_added(refs: list[str], growth: list[int]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        urls = [f"sqlite:///{Path(folder) / 'store0.db'}", f"sqlite:///{Path(folder) / 'store1.db'}"]
        written: dict[UUID, int] = {}
        for step, added in enumerate([0, *growth]):
            urls += [f"sqlite:///{Path(folder) / f'store{len(urls) + i}.db'}" for i in range(added)]
            with cl.Ledger.open(urls, run_policy=False) as ledger:
                for n, ref in enumerate(refs):
                    if n % (step + 1) != 0:
                        continue
                    if not _is_uuid(ref):
                        cid = ledger.get_or_start(ref)
                    elif UUID(ref) in written:
                        cid = UUID(ref)
                    else:
                        cid = ledger.start(conversation_id=UUID(ref))
                    ledger.append(cid, {"role": "user", "content": f"{step}"})
                    written[cid] = written.get(cid, 0) + 1
                # Every conversation written so far is found, whole, in exactly one store.
                assert sorted(ledger.conversation_ids()) == sorted(written)
                for cid, count in written.items():
                    assert len(ledger.transcript(cid)) == count
                    assert sum(bool(list(s.local_store.app.events.get(cid, lte=1))) for s in ledger.shards) == 1


def _is_uuid(ref: str) -> bool:
    try:
        UUID(ref)
    except ValueError:
        return False
    return True
