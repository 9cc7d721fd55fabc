"""A message's original: optional, verbatim, appended all or nothing, read back with
the working memory; events stored before the field existed still load. (Its place in
the digest chain: tests/integrations/test_langchain_lossless.py.)"""

from __future__ import annotations

import json

import pytest

import contextledger as cl
from contextledger.application.formats.originals import (
    context_entries,
    extend_with_originals,
    transcript_originals,
)
from contextledger.domain.events import MessageAppended
from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import Message

message = Message(role="user", content="hi")


def test_an_event_stored_without_the_field_still_loads() -> None:
    event = MessageAppended(originator_id="00000000-0000-0000-0000-000000000001", originator_version=2,
                            timestamp="2026-01-01T00:00:00Z", position=0, message=message, tokens=3, digest="d")
    stored = json.loads(event.model_dump_json())
    del stored["original"]
    assert MessageAppended.model_validate(stored) == event


def test_originals_come_back_verbatim_and_a_bad_one_writes_nothing() -> None:
    original = {"format": "x", "version": 1, "n": [1, 2]}
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(system_prompt="s")
        with pytest.raises(InvalidMessageError, match="original"):
            extend_with_originals(ledger, cid, [(message, {"format": "x"}), (message, {"format": "x", "n": float("nan")})])
        assert ledger.transcript(cid) == []
        assert extend_with_originals(ledger, cid, [({"role": "user", "content": "hi"}, original)]) == [0]
        ledger.append(cid, {"role": "user", "content": "hi"})
        plain = message.to_openai()
        assert transcript_originals(ledger, cid) == [(0, plain, original), (1, plain, None)]
        memory = context_entries(ledger, cid)
        assert [(e.position, e.original, e.reduced) for e in memory.entries] == [
            (None, None, False), (0, original, False), (1, None, False)
        ]
        assert [e.message for e in memory.entries] == ledger.context(cid)
        assert ledger.verify(cid).ok


def test_one_message_object_appended_twice_keeps_each_original() -> None:
    first, second = {"format": "x", "n": 1}, {"format": "x", "n": 2}
    with cl.Ledger.open("memory://", run_policy=False) as ledger:
        cid = ledger.start(system_prompt="s")
        extend_with_originals(ledger, cid, [(message, first), (message, second)])
        assert [(e.position, e.original) for e in context_entries(ledger, cid).entries] == [
            (None, None), (0, first), (1, second)
        ]
