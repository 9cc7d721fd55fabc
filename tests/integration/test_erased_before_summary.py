"""A conversation whose subject another process erased is not sent to a summarizer by a
process that still holds the subject's key in its cache.

Two ledgers share one store, as two processes do. ``here`` reads the conversation of
subject ``victim``, so its key is cached for ``cache_seconds`` (60 s); ``there`` erases
the subject. Reads in ``here`` may go on for up to that minute (docs/privacy.md), but a
summary sends the content to a third party: before a range is handed to a summarizer
the key table itself is read for the conversation's subjects. Without that check the
policy of ``here`` sent the erased messages to its summarizer, and
``here.pending_summary`` handed them to the caller's own, on a SQLite file, on
PostgreSQL, and with the keys in a key store of their own.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from uuid import UUID

import openai
import pytest

import contextledger as cl
from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.application.shared.addressing import id_for_key
from contextledger.application.storage.sharding import home_store
from contextledger.testing import FakeOpenAIServer, Reply, ScriptedSummarizer

SECRET = "qx-erased-before-summary-7f30"
POLICY = ReductionPolicy(trigger_messages=4, keep_messages=1, max_summary_tokens=200)


class Recording(ScriptedSummarizer):
    """A ``ScriptedSummarizer`` that also keeps every request's text: what would have
    left the process."""

    def __init__(self, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.sent: list[str] = []
        self.called = threading.Event()

    def summarize(self, request: cl.SummaryRequest) -> cl.SummaryResult:
        with self.lock:
            self.sent.append(repr(request))
        self.called.set()
        return super().summarize(request)


def _settings(url: str, key_store: str | None, **more: object) -> Settings:
    return Settings(
        database_url=url,
        cipher_key=base64.b64encode(os.urandom(32)).decode(),
        key_store=key_store,
        poll_interval=0.02,
        **more,  # type: ignore[arg-type]
    )


@pytest.fixture(params=["sqlite", "postgres", "postgres-key-store"])
def stores(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, str | None]:
    """The event store's URL and the key store's (None: the keys live in the event store)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}", None
    url = str(request.getfixturevalue("postgres_url"))
    if request.param == "postgres":
        return url, None
    return url, str(request.getfixturevalue("postgres_key_store_url"))


def _over_the_trigger(ledger: Ledger, cid: cl.ConversationRef, secret: str = SECRET) -> None:
    for i in range(5):
        role = "user" if i % 2 == 0 else "assistant"
        ledger.append(cid, {"role": role, "content": f"message {i}: my secret is {secret}"})


def test_pending_summary_reads_the_key_table_before_handing_out_content(stores: tuple[str, str | None]) -> None:
    url, key_store = stores
    settings = _settings(url, key_store, run_policy=False)
    with Ledger.open(settings=settings) as here, Ledger.open(settings=settings) as there:
        gone = here.start("You help.", policy=POLICY, subject="victim")
        kept = here.start("You help.", policy=POLICY, subject="someone-else")
        for cid in (gone, kept):
            _over_the_trigger(here, cid)
        request = here.pending_summary(gone)
        assert request is not None and SECRET in repr(request)  # the key is cached here now

        there.erase(subject="victim", reason="a request")
        with pytest.raises(cl.ConversationErasedError) as raised:
            here.pending_summary(gone)
        assert raised.value.subject == "victim"
        # Learnt: every read here says so now, not after the keys' cache_seconds.
        with pytest.raises(cl.ConversationErasedError):
            here.context(gone)
        # Another subject's conversation is untouched.
        other = here.pending_summary(kept)
        assert other is not None and SECRET in repr(other)


def test_on_shards_the_check_reads_the_key_table_of_the_conversation_s_own_store(tmp_path: Path) -> None:
    """Each store keeps its own keys: the conversation in the second store is checked
    against that store's key table."""
    stores = (f"sqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}")
    key = next(f"k{n}" for n in range(1000) if home_store(id_for_key(f"k{n}"), 2) == 1)
    settings = Settings(stores=stores, cipher_key=base64.b64encode(os.urandom(32)).decode(), run_policy=False)
    with Ledger.open(settings=settings) as here, Ledger.open(settings=settings) as there:
        gone = here.start("You help.", policy=POLICY, subject="victim", key=key)
        assert list(here.shards[1].local_store.app.events.get(gone, lte=1))  # in the second store
        _over_the_trigger(here, gone)
        assert SECRET in repr(here.pending_summary(gone))

        there.erase(subject="victim", reason="a request")
        with pytest.raises(cl.ConversationErasedError):
            here.pending_summary(gone)


def test_a_what_if_does_not_give_its_summarizer_content_erased_elsewhere(shared_url: str) -> None:
    """``simulate`` replays the log into its candidate policy, whose summarizer (the
    caller's, possibly a provider) is given the replayed messages: the key table is read
    before a conversation's log is replayed."""
    settings = _settings(shared_url, None, run_policy=False)
    with Ledger.open(settings=settings) as here, Ledger.open(settings=settings) as there:
        gone = here.start("You help.", subject="victim")
        kept = here.start("You help.", subject="someone-else")
        for cid in (gone, kept):
            _over_the_trigger(here, cid)
        assert SECRET in str(here.context(gone))  # the key is cached here
        candidate = ReductionPolicy(trigger_messages=3, keep_messages=1)

        there.erase(subject="victim", reason="a request")
        summarizer = Recording()
        with pytest.raises(cl.ConversationErasedError):
            here.simulate(candidate, gone, summarizer)
        # Over the whole store the erased conversation is left out; the other is replayed.
        report = here.simulate(candidate, None, summarizer)
        assert [c.conversation_id for c in report.conversations] == [kept]
        assert {c for c, _, _ in summarizer.calls} == {kept}


def test_the_policy_does_not_send_a_conversation_erased_elsewhere_to_its_summarizer(
    stores: tuple[str, str | None],
) -> None:
    """``here`` writes both conversations past their triggers; its only summarization
    slot is held on the first while ``there`` erases the second's subject; then the
    slot frees and the second's range comes up."""
    url, key_store = stores
    release = threading.Event()
    summarizer = Recording(hold={}, wait_timeout=30)
    settings = _settings(url, key_store, max_concurrent_summaries=1)
    with (
        Ledger.open(settings=settings.model_copy(update={"run_policy": False})) as there,
        Ledger.open(settings=settings, summarizer=summarizer) as here,
    ):
        first = here.start("You help.", policy=POLICY, subject="first")
        gone = here.start("You help.", policy=POLICY, subject="victim")
        summarizer.hold[first] = release
        _over_the_trigger(here, first, "nothing secret")
        assert summarizer.called.wait(30)  # the one slot is taken, held
        _over_the_trigger(here, gone)  # its range waits for the slot
        there.erase(subject="victim", reason="a request")
        release.set()
        assert here.wait_idle(30)

        assert [c for c, _, _ in summarizer.calls] == [first], summarizer.calls
        assert not any(SECRET in sent for sent in summarizer.sent)
        assert there.pending_summary(first) is None
        with pytest.raises(cl.ConversationErasedError):
            here.context(gone)


# -- the readable text of an opaque OpenAI compaction (``Settings.native_readable``) --

MODEL = "gpt-4.1-mini"


def _turn(ledger: Ledger, client: openai.OpenAI, cid: UUID, turn: int) -> Any:
    """A Responses turn with server-side compaction; the reply, not yet appended."""
    ledger.append(cid, {"type": "message", "role": "user", "content": f"Fact {turn}? My secret is {SECRET}."})
    return client.responses.create(
        model=MODEL,
        context_management=[{"type": "compaction", "compact_threshold": 300}],
        extra_body=ledger.context(cid, format="responses"),
    )


def _compacts(reply: Any) -> bool:
    return any(item.type == "compaction" for item in reply.output)


@contextmanager
def _victim_in_responses(url: str, **more: object) -> Iterator[tuple[Ledger, Ledger, Recording, Any, UUID]]:
    """``here`` (with a recording summarizer) and ``there`` on one store, a fake
    Responses server that compacts, its client, and a conversation of ``victim``."""
    summarizer = Recording()
    settings = _settings(url, None, run_policy=False, **more)
    with (
        FakeOpenAIServer(strict=True) as server,
        Ledger.open(settings=settings, summarizer=summarizer) as here,
        Ledger.open(settings=settings) as there,
    ):
        server.default = Reply("Oslo sits at the head of the Oslofjord.")
        client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        cid = here.start("You answer about Oslo.", model=MODEL, subject="victim")
        yield here, there, summarizer, client, cid


def test_an_on_demand_readable_summary_is_not_made_of_content_erased_elsewhere(shared_url: str) -> None:
    with _victim_in_responses(shared_url, native_readable="on_demand") as (here, there, summarizer, client, cid):
        for turn in range(30):
            reply = _turn(here, client, cid, turn)
            here.append(cid, reply)
            if _compacts(reply):
                break
        assert _compacts(reply) and summarizer.calls == []  # nothing readable made yet

        there.erase(subject="victim", reason="a request")
        # A chat read needs the compaction's readable text, made by the summarizer.
        with pytest.raises(cl.ConversationErasedError):
            here.context(cid, format="openai")
        assert summarizer.calls == [] and summarizer.sent == []


def test_an_appended_compaction_s_readable_summary_is_not_made_of_content_erased_elsewhere(
    shared_url: str,
) -> None:
    with _victim_in_responses(shared_url) as (here, there, summarizer, client, cid):  # native_readable="eager"
        for turn in range(30):
            reply = _turn(here, client, cid, turn)
            if _compacts(reply):
                break
            here.append(cid, reply)
        assert _compacts(reply) and summarizer.calls == []

        there.erase(subject="victim", reason="a request")
        with pytest.raises(cl.ConversationErasedError):
            here.append(cid, reply)  # its readable summary would be made first
        assert summarizer.calls == [] and summarizer.sent == []
