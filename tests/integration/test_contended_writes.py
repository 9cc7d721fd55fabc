"""Two processes' ledgers writing one conversation on one store: a save that conflicts
on a conversation that has conflicted before is retried from the cached copy,
returned to where it was and brought up to date from the log (not reloaded from its
snapshot), and nothing is lost, doubled or reordered."""

from __future__ import annotations

import contextledger as cl
from contextledger.application import Ledger, Settings


def test_a_contended_conversation_catches_up_from_the_log_after_a_conflict(shared_url: str) -> None:
    url = shared_url
    policy = cl.ReductionPolicy(trigger_messages=6, keep_messages=2)
    with Ledger(Settings(database_url=url, run_policy=False)) as a, Ledger(
        Settings(database_url=url, run_policy=False)
    ) as b:
        cid = a.start("sys", policy=policy)
        sent: list[str] = []

        def say(ledger: Ledger, text: str) -> None:
            ledger.append(cid, {"role": "user", "content": text})
            sent.append(text)

        say(a, "a1")
        say(b, "b1")
        say(a, "a2")  # conflicts (a's copy is stale): evicted and reloaded, now contended
        reloaded = a.store._cache[cid]
        loads: list[object] = []
        original_get = a.store.app.repository.get

        def counting_get(*args: object, **kwargs: object) -> object:
            loads.append(args)
            return original_get(*args, **kwargs)

        a.store.app.repository.get = counting_get  # type: ignore[method-assign]
        for round_ in range(3):
            say(b, f"b{round_ + 2}")
            say(a, f"a{round_ + 3}")  # conflicts again: caught up from the log
        # the same cached object throughout, never loaded from a snapshot again
        assert a.store._cache[cid] is reloaded and loads == []
        assert [m.message["content"] for m in a.transcript(cid)] == sent
        assert a.context(cid) == b.context(cid)
        assert a.conversation(cid).state == b.conversation(cid).state
        assert a.verify(cid).ok
