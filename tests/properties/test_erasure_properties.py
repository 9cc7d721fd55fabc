"""Erasing a data subject leaves every other conversation as it was: for any number of
conversations spread over a few subjects (some shared, some their own), erasing one
subject makes exactly its conversations raise ``ConversationErasedError`` and leaves
the contexts, replays and ``verify`` of all the others unchanged."""

from __future__ import annotations

import base64
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.shared.addressing import id_for_key
from contextledger.infrastructure.keys.subject_mapper import subject_keys_of

SUBJECTS = ["tenant-1", "tenant-2", None]  # None: the conversation is its own subject


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    plan=st.lists(
        st.tuples(st.sampled_from(SUBJECTS), st.integers(min_value=0, max_value=4)), min_size=1, max_size=6
    ),
    victim=st.integers(min_value=0, max_value=5),
)
def test_erasing_one_subject_leaves_the_others_unchanged(
    plan: list[tuple[str | None, int]], victim: int
) -> None:
    key = base64.b64encode(os.urandom(32)).decode()
    ledger = cl.Ledger(cl.Settings(database_url="memory://", cipher_key=key, run_policy=False))
    try:
        keys = subject_keys_of(ledger)
        assert keys is not None
        subject_of: dict[object, str] = {}
        for index, (subject, messages) in enumerate(plan):
            name = f"conversation-{index}"
            if subject is not None:
                keys.assign(id_for_key(name), subject)
            cid = ledger.start(f"prompt {index}", key=name)
            for m in range(messages):
                ledger.append(cid, {"role": "user", "content": f"message {m} of {index}"})
            subject_of[cid] = subject if subject is not None else str(cid)
        chosen = list(subject_of.values())[victim % len(subject_of)]
        before = {
            cid: (ledger.context(cid), [e.record() for e in ledger.replay(cid)])
            for cid, s in subject_of.items()
            if s != chosen
        }
        report = ledger.erase(subject=chosen, reason="property")
        erased = {cid for cid, s in subject_of.items() if s == chosen}
        assert set(report.conversations) == erased
        for cid in erased:
            try:
                ledger.context(cid)
            except cl.ConversationErasedError as exc:
                assert exc.reason == "property"
            else:
                raise AssertionError(f"{cid} is readable after its subject was erased")
        after = {cid: (ledger.context(cid), [e.record() for e in ledger.replay(cid)]) for cid in before}
        assert after == before
        verified = ledger.verify()
        assert verified.ok and set(verified.erased) == erased
    finally:
        ledger.close()
