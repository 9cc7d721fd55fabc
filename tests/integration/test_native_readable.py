"""``Settings.native_readable``: the readable summary of an opaque OpenAI compaction,
made when the compaction is appended (``eager``, the default) or at the first read in
a format that cannot take the opaque item (``on_demand``), recorded then so that a
read at any version gives the same answer before and after it is made; on SQLite and
PostgreSQL, with the real openai SDK against the fake server. No format but the
Responses one ever carries the opaque payload or ``"[compaction]"``."""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import contextledger as cl
from contextledger.infrastructure.readmodels import attach_read_models
from contextledger.testing import (
    FakeOpenAIServer,
    Reply,
    ScriptedSummarizer,
    anthropic_request_violations,
    gemini_request_violations,
    openai_context_violations,
)

MODEL = "gpt-4.1-mini"
OTHER_FORMATS = ("openai", "anthropic", "gemini")


def _loop(ledger: cl.Ledger, server: FakeOpenAIServer, cid: Any, turns: int) -> list[tuple[int, Any]]:
    """Turns sent with ``format="responses"`` only: (version, what was sent) each.

    The context goes in ``extra_body``, which the client sends as it is: its typed
    parameters are first walked item by item against every Responses input type (about
    50 ms a request, most of this module's time), and for these plain items that walk
    changes nothing (the first test checks the server got exactly each context). The
    SDK still sends each request and parses each reply the ledger appends."""
    client = openai.OpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
    sent = []
    for turn in range(turns):
        ledger.append(cid, {"type": "message", "role": "user", "content": f"Tell me fact {turn} about Oslo."})
        version = ledger.conversation(cid).version
        ctx = ledger.context(cid, version=version, format="responses")
        reply = client.responses.create(
            model=MODEL,
            context_management=[{"type": "compaction", "compact_threshold": 300}],
            extra_body=ctx,
        )
        sent.append((version, ctx))
        ledger.append(cid, reply)
    return sent


def _opaque(ledger: cl.Ledger, cid: Any) -> list[str]:
    return [s.payload[0]["encrypted_content"] for s in ledger.summaries(cid) if s.payload]


def _read(ledger: cl.Ledger, cid: Any, version: int | None, fmt: str) -> Any:
    return ledger.context(cid, version=version, format=fmt)


def _assert_readable(body: Any, fmt: str, opaque: list[str]) -> None:
    text = json.dumps(body)
    assert "[compaction]" not in text and "encrypted_content" not in text
    assert not any(o in text for o in opaque)
    assert "Summary of" in text  # the summarizer's readable summary stands in
    if fmt == "openai":
        assert openai_context_violations(body) == []
    elif fmt == "anthropic":
        assert anthropic_request_violations({"model": "claude-haiku-4-5", "max_tokens": 5, **body}) == []
    else:
        assert (
            gemini_request_violations(body["contents"], system_instruction=body["system_instruction"]) == []
        )


def test_on_demand_makes_the_readable_summary_at_the_first_read_that_needs_it(shared_url: str) -> None:
    summarizer = ScriptedSummarizer()
    options = cl.Settings(database_url=shared_url, native_readable="on_demand")
    with (
        FakeOpenAIServer(strict=True) as server,
        cl.Ledger.open(settings=options, summarizer=summarizer, run_policy=False) as ledger,
    ):
        server.default = Reply("Oslo sits at the head of the Oslofjord.")
        models = attach_read_models(ledger)
        cid = ledger.start("You answer about Oslo.", model=MODEL)
        sent = _loop(ledger, server, cid, 30)
        assert server.violations == [] and server.compactions.issued > 2
        # The appends never waited for the summarizer: no readable summary yet.
        assert summarizer.calls == []
        natives = ledger.summaries(cid)
        assert len(natives) == server.compactions.issued
        assert {(s.native, s.text) for s in natives} == {("responses", "")}
        opaque = _opaque(ledger, cid)
        for request, (_, ctx) in zip(server.requests_to("responses"), sent, strict=True):
            assert {k: request.body[k] for k in ("instructions", "input")} == ctx
        # A chat read at a past version that rests on the second compaction makes its
        # readable summary (and only that one), records it, and answers with it.
        second = natives[1]
        past = next(v for v, _ in sent if v > second.version)
        end = ledger.conversation(cid).version
        first_read = _read(ledger, cid, past, "openai")
        assert len(summarizer.calls) == 1
        assert summarizer.calls[0][1:] == (second.from_position, second.through_position)
        _assert_readable(first_read, "openai", opaque)
        assert ledger.conversation(cid).version == end + 1  # recorded as one event
        assert ledger.summaries(cid)[1].text.startswith("Summary of")
        # Every other format at that version, and the same read again: the same text,
        # no new summarizer call; the Responses format is what was sent, unchanged.
        for fmt in OTHER_FORMATS:
            _assert_readable(_read(ledger, cid, past, fmt), fmt, opaque)
        assert _read(ledger, cid, past, "openai") == first_read
        assert len(summarizer.calls) == 1
        for version, ctx in sent:
            assert ledger.context(cid, version=version, format="responses") == ctx
        # The newest working memory: the latest compaction's readable summary.
        for fmt in OTHER_FORMATS:
            _assert_readable(_read(ledger, cid, None, fmt), fmt, opaque)
        assert len(summarizer.calls) == 2
        memory = ledger.working_memory(cid)
        assert memory.version == ledger.conversation(cid).version == end + 2  # after the second
        assert memory.messages == _read(ledger, cid, None, "openai")
        # The read models follow; the log verifies; nothing was retracted.
        assert ledger.wait_idle(30)
        assert models.summaries.summaries(cid) == ledger.summaries(cid)
        assert ledger.verify(cid).problems == ()
        assert ledger.totals(cid).retracted_messages == 0
        assert len(ledger.transcript(cid)) == 60
        made = ledger.summaries(cid)
    # Another process reads the same versions: the recorded texts, no summarizer call.
    again = ScriptedSummarizer()
    with cl.Ledger.open(settings=options, summarizer=again, run_policy=False) as reopened:
        assert _read(reopened, cid, past, "openai") == first_read
        assert reopened.summaries(cid) == made
        assert again.calls == []


def test_eager_makes_it_at_the_append_and_on_demand_reads_give_the_same_answers(shared_url: str) -> None:
    summarizer = ScriptedSummarizer()
    with (
        FakeOpenAIServer() as server,
        cl.Ledger.open(shared_url, summarizer=summarizer, run_policy=False) as ledger,
    ):
        assert ledger.settings.native_readable == "eager"
        cid = ledger.start("You answer about Oslo.", model=MODEL)
        sent = _loop(ledger, server, cid, 20)
        calls = len(summarizer.calls)
        assert calls == server.compactions.issued > 0  # one per compaction, at its append
        assert all(s.text.startswith("Summary of") for s in ledger.summaries(cid))
        opaque = _opaque(ledger, cid)
        for version, _ in sent[-3:]:
            for fmt in OTHER_FORMATS:
                _assert_readable(_read(ledger, cid, version, fmt), fmt, opaque)
        assert len(summarizer.calls) == calls  # reads never call it


def test_the_setting_is_read_from_the_environment_and_checked() -> None:
    assert cl.Settings().native_readable == "eager"
    env = {"CONTEXTLEDGER_NATIVE_READABLE": "on_demand"}
    assert cl.Settings.from_env(env).native_readable == "on_demand"
    with pytest.raises(cl.ConfigurationError, match="native_readable"):
        cl.Settings(native_readable="lazy")


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=st.integers(min_value=6, max_value=16),
    reads=st.lists(
        st.tuples(st.floats(min_value=0, max_value=1), st.sampled_from(("responses", *OTHER_FORMATS))),
        min_size=1,
        max_size=12,
    ),
)
def test_a_read_at_a_version_never_changes_and_never_shows_the_opaque_item(
    turns: int, reads: list[tuple[float, str]]
) -> None:
    """Whatever versions are read in whatever formats, in whatever order: each read of
    (version, format) answers as the first one did, and only the Responses format
    carries the opaque item."""
    options = cl.Settings(database_url="memory://", native_readable="on_demand")
    with (
        FakeOpenAIServer() as server,
        cl.Ledger.open(settings=options, summarizer=ScriptedSummarizer(), run_policy=False) as ledger,
    ):
        cid = ledger.start("s", model=MODEL)
        _loop(ledger, server, cid, turns)
        last = ledger.conversation(cid).version
        opaque = _opaque(ledger, cid)
        seen: dict[tuple[int, str], Any] = {}
        for where, fmt in [*reads, *reads]:
            version = 2 + int(where * (last - 2))
            body = _read(ledger, cid, version, fmt)
            assert seen.setdefault((version, fmt), body) == body
            if fmt != "responses":
                text = json.dumps(body)
                assert "[compaction]" not in text and "encrypted_content" not in text
                assert not any(o in text for o in opaque)
        assert ledger.verify(cid).problems == ()


def test_a_policy_summary_after_an_unread_compaction_extends_its_readable_text(shared_url: str) -> None:
    """On demand, the policy's next summary re-folds the compaction: the readable
    summary is made first, so the new one extends it (and the log verifies)."""
    summarizer = ScriptedSummarizer()
    options = cl.Settings(database_url=shared_url, native_readable="on_demand")
    policy = cl.ReductionPolicy(trigger_messages=30, keep_messages=4)
    with (
        FakeOpenAIServer() as server,
        cl.Ledger.open(settings=options, summarizer=summarizer, run_policy=False) as ledger,
    ):
        cid = ledger.start("You answer about Oslo.", model=MODEL, policy=policy)
        _loop(ledger, server, cid, 20)
        natives = ledger.summaries(cid)
        native = natives[-1]
        assert natives and {s.text for s in natives} == {""} and summarizer.calls == []
        for n in range(40):
            ledger.append(cid, {"role": "user", "content": f"Another question about Oslo, number {n}."})
        request = ledger.pending_summary(cid)
        assert request is not None
        # The compaction's readable summary was made and recorded before the request.
        assert summarizer.calls == [(cid, native.from_position, native.through_position)]
        readable = ledger.summaries(cid)[len(natives) - 1].text
        assert readable.startswith("Summary of") and readable in (request.previous_summary or "")
        ledger.record_summary(request, summarizer.summarize(request))
        assert [s.native for s in ledger.summaries(cid)] == ["responses"] * len(natives) + [None]
        assert ledger.verify(cid).problems == ()
        opaque = _opaque(ledger, cid)
        for fmt in OTHER_FORMATS:
            text = json.dumps(_read(ledger, cid, None, fmt))
            assert not any(o in text for o in opaque) and "[compaction]" not in text


def test_on_demand_forks_and_edits_read_a_readable_summary(shared_url: str) -> None:
    """A fork made before any readable summary records its own for the summary it
    inherits; after an edit that invalidates the newest compaction no format carries an
    opaque item either; the logs verify."""
    options = cl.Settings(database_url=shared_url, native_readable="on_demand")
    with (
        FakeOpenAIServer() as server,
        cl.Ledger.open(settings=options, summarizer=ScriptedSummarizer(), run_policy=False) as ledger,
    ):
        cid = ledger.start("You answer about Oslo.", model=MODEL)
        _loop(ledger, server, cid, 30)
        natives = ledger.summaries(cid)
        assert len(natives) > 1 and {s.text for s in natives} == {""}
        opaque = _opaque(ledger, cid)
        fork = ledger.fork(cid)
        forked_at = ledger.conversation(fork).version
        memory = ledger.working_memory(fork)  # the read that makes it answers at the new version
        assert memory.version == ledger.conversation(fork).version == forked_at + 1
        for fmt in OTHER_FORMATS:
            _assert_readable(_read(ledger, fork, None, fmt), fmt, opaque)
        inherited = ledger.summaries(fork)[-1]
        assert inherited.inherited_from == cid and inherited.text.startswith("Summary of")
        assert ledger.summaries(cid)[-1].text == ""  # recorded in the fork's log only
        # An edit of a message the newest compaction covers (but not the one before).
        latest, before = natives[-1], natives[-2]
        position = next(
            e.position
            for e in ledger.transcript(cid)
            if e.position > before.through_position and e.message["role"] == "user"
        )
        assert latest.from_position <= position <= latest.through_position
        ledger.edit(cid, position, {"role": "user", "content": "Tell me about Bergen instead."})
        after = ledger.summaries(cid)
        assert after[-1].valid is False and after[-2].valid is True
        for fmt in OTHER_FORMATS:
            text = json.dumps(_read(ledger, cid, None, fmt))
            assert "Bergen" in text and "[compaction]" not in text and "encrypted_content" not in text
            assert not any(o in text for o in opaque)
        assert ledger.verify(cid).problems == () and ledger.verify(fork).problems == ()


def test_a_fork_s_readable_summary_of_an_inherited_compaction_is_erased_with_the_source_s_subject(
    tmp_path: Any,
) -> None:
    """A fork of another subject records the readable summary of a compaction it
    inherits (the source's content): erasing the source's subject makes it unreadable,
    so the fork, read as what is left of it (its remainder), shows nothing of it."""
    key = base64.b64encode(os.urandom(32)).decode()
    options = cl.Settings(
        database_url=f"sqlite:///{tmp_path / 'ledger.db'}", cipher_key=key, native_readable="on_demand"
    )
    with (
        FakeOpenAIServer() as server,
        cl.Ledger.open(settings=options, summarizer=ScriptedSummarizer(), run_policy=False) as ledger,
    ):
        cid = ledger.start("You answer about Oslo.", model=MODEL, subject="subject-a")
        _loop(ledger, server, cid, 20)
        fork = ledger.fork(cid, subject="subject-b")
        ledger.context(fork)  # the fork records the readable summary of what it inherits
        readable = ledger.summaries(fork)[-1].text
        assert readable.startswith("Summary of")
        ledger.erase("subject-a", "the subject asked")
        assert all(summary.text != readable for summary in ledger.summaries(fork))
        assert readable not in json.dumps(ledger.context(fork))
        assert "Oslo" not in json.dumps(ledger.context(fork))


def test_a_read_only_ledger_makes_the_readable_summary_for_its_read_and_writes_nothing(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with (
        FakeOpenAIServer() as server,
        cl.Ledger.open(
            settings=cl.Settings(database_url=url, native_readable="on_demand"),
            summarizer=ScriptedSummarizer(),
            run_policy=False,
        ) as ledger,
    ):
        cid = ledger.start("You answer about Oslo.", model=MODEL)
        _loop(ledger, server, cid, 20)
        opaque = _opaque(ledger, cid)
        end = ledger.conversation(cid).version
    summarizer = ScriptedSummarizer()
    with cl.Ledger.open(
        settings=cl.Settings(database_url=url, read_only=True), summarizer=summarizer
    ) as reader:
        for fmt in OTHER_FORMATS:
            _assert_readable(_read(reader, cid, None, fmt), fmt, opaque)
        assert len(summarizer.calls) == len(OTHER_FORMATS)  # made for each read, not kept
        assert reader.conversation(cid).version == end
        assert {s.text for s in reader.summaries(cid)} == {""}
