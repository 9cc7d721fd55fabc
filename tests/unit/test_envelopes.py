"""A message's envelope: optional, verbatim, chained into the digest; messages without
one chain exactly as before (stored logs keep verifying)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import contextledger as cl
from contextledger.application.envelopes import append_enveloped, enveloped_memory, enveloped_transcript
from contextledger.domain.digests import chain_digest
from contextledger.domain.errors import InvalidArgumentError
from contextledger.domain.events import MessageAppended
from contextledger.domain.messages import Message

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=10,
)
envelopes = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
message = Message(role="user", content="hi")


@given(envelope=envelopes)
def test_the_envelope_is_chained_and_absent_means_the_old_digest(envelope: dict[str, object]) -> None:
    assert chain_digest("0" * 64, message) == chain_digest("0" * 64, message, None, None)
    assert chain_digest("0" * 64, message, None, envelope) != chain_digest("0" * 64, message)


def test_an_event_stored_without_the_field_still_loads() -> None:
    event = MessageAppended(originator_id="00000000-0000-0000-0000-000000000001", originator_version=2,
                            timestamp="2026-01-01T00:00:00Z", position=0, message=message, tokens=3, digest="d")
    stored = json.loads(event.model_dump_json())
    del stored["envelope"]
    assert MessageAppended.model_validate(stored) == event


def test_envelopes_come_back_verbatim_and_bad_ones_write_nothing() -> None:
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(system_prompt="s")
        with pytest.raises(InvalidArgumentError, match="envelope"):
            append_enveloped(ledger, cid, [(message, {"ok": 1}), (message, {"bad": float("nan")})])
        assert ledger.transcript(cid) == []
        append_enveloped(ledger, cid, [(message, {"format": "x/1", "n": [1, 2]}), (message, None)])
        assert enveloped_transcript(ledger, cid) == [(message, {"format": "x/1", "n": [1, 2]}), (message, None)]
        shown = enveloped_memory(ledger, cid).shown
        assert [(s.kind, s.envelope) for s in shown] == [
            ("system_prompt", None), ("message", {"format": "x/1", "n": [1, 2]}), ("message", None)
        ]
        assert ledger.verify(cid).ok
