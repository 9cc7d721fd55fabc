"""The Agents SDK's ``OpenAIResponsesCompactionSession`` over ``LedgerSession``: the SDK's
own ``Runner`` and its automatic and forced compaction against the local Responses
server, with every compaction recorded as a native summary and the log kept whole."""

from __future__ import annotations

import asyncio
import base64
import json
import os

import pytest

pytest.importorskip("agents")

from agents import (
    Agent,
    OpenAIResponsesCompactionSession,
    OpenAIResponsesModel,
    Runner,
    function_tool,
    set_tracing_disabled,
)
from openai import AsyncOpenAI

import contextledger as cl
from contextledger.integrations.agents import LedgerSession
from contextledger.testing import Call, FakeOpenAIServer, Func, RecordedRequest, Reply, ScriptedSummarizer

set_tracing_disabled(True)


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny and 21C in {city}"


def scripted_model(request: RecordedRequest) -> Reply:
    """A call of the weather tool on every user turn, then an answer from its output."""
    last = request.body["input"][-1]
    if last.get("type") == "function_call_output":
        return Reply(f"It is {str(last['output'])[:40]}.")
    turn = str(last.get("content")).rsplit(" ", 1)[-1]
    return Reply(
        reasoning=f"turn {turn} needs the weather", tool_calls=[Call("weather", {"city": f"city{turn}"})]
    )


def _run(url: str, turns: int, readable: str = "eager") -> None:
    summarizer = ScriptedSummarizer()
    options = cl.Settings(database_url=url, native_readable=readable)
    with (
        FakeOpenAIServer(default=Func(scripted_model), strict=True) as server,
        cl.Ledger.open(settings=options, summarizer=summarizer, run_policy=False) as ledger,
    ):
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        agent = Agent(
            name="assistant",
            instructions="Answer briefly.",
            tools=[weather],
            model=OpenAIResponsesModel(model="gpt-4.1-mini", openai_client=client),
        )
        inner = LedgerSession("user-1", ledger, model="gpt-4.1-mini")
        session = OpenAIResponsesCompactionSession(
            "user-1", underlying_session=inner, client=client, model="gpt-4.1"
        )
        runs: list[tuple[int, int]] = []  # (index of the run's first request, version before it)

        async def converse() -> None:
            for turn in range(turns):
                runs.append((len(server.requests_to("responses")), inner.version()))
                await Runner.run(agent, f"turn {turn}", session=session)
            await session.run_compaction({"force": True})  # a forced one as well

        asyncio.run(converse())
        cid = inner.conversation_id
        assert server.violations == []  # every request valid, every compaction item accepted
        compactions = server.requests_to("compact")
        summaries = ledger.summaries(cid)
        assert len(compactions) > turns // 10 and len(summaries) == len(compactions)
        assert {s.native for s in summaries} == {"responses"} and all(s.valid for s in summaries)
        assert ledger.totals(cid).retracted_messages == 0
        # What the model was sent at each turn is what the log re-derives at that version.
        requests = server.requests_to("responses")
        for index, (first, version) in enumerate(runs):
            sent = requests[first].body["input"]
            assert sent[-1] == {"content": f"turn {index}", "role": "user"}
            assert ledger.context(cid, version=version, format="responses") == {"input": sent[:-1]}
        # The session gives back what the last compaction returned, then what followed.
        latest = summaries[-1]
        assert latest.payload is not None
        items = asyncio.run(session.get_items())
        compacted = [a["output"] for a in server.answers if a.get("object") == "response.compaction"][-1]
        assert list(latest.payload) == compacted  # kept exactly as it came
        assert items == [{k: v for k, v in i.items() if k != "created_by"} for i in compacted]
        # Every item ever added is in the log, none twice.
        transcript = inner.transcript_items()
        assert [i["content"] for i in transcript if i.get("role") == "user"] == [
            f"turn {t}" for t in range(turns)
        ]
        outputs = [
            item
            for answer in server.answers
            if answer.get("object") == "response"
            for item in answer["output"]
        ]
        assert [i for i in transcript if "id" in i] == outputs
        assert "compaction" not in json.dumps([e.message for e in ledger.transcript(cid)])
        # The readable summaries: made by each compaction (eager), or none yet (on demand).
        made_by_compactions = len(summarizer.calls)
        assert made_by_compactions == (len(summaries) if readable == "eager" else 0)
        # The other formats read a readable summary, never the opaque item.
        for body in (
            ledger.context(cid),
            ledger.context(cid, format="anthropic"),
            ledger.context(cid, format="gemini"),
        ):
            text = json.dumps(body)
            assert "encrypted_content" not in text and "[compaction]" not in text
        assert ledger.summaries(cid)[-1].text.startswith("Summary")
        assert len(summarizer.calls) == made_by_compactions + (readable == "on_demand")
        assert ledger.verify(cid).ok


# The session compacts every third turn (four items a turn, ten trigger it), and a
# compaction keeps every user message, so each request grows by three items per three
# turns: the cost of a run grows with the square of its turns. 20 turns make six
# automatic compactions and the forced one (40 made 13 and the forced one), enough to
# show every compaction recorded, each turn's request re-derived at its version, and a
# compaction of a history that already holds one, several times over.
TURNS = 20


def test_the_compaction_session_over_a_ledger_session_keeps_the_log_whole_on_sqlite(sqlite_url: str) -> None:
    _run(sqlite_url, TURNS)


@pytest.mark.postgres
def test_the_compaction_session_over_a_ledger_session_keeps_the_log_whole_on_postgresql(
    postgres_url: str,
) -> None:
    _run(postgres_url, TURNS)


def test_on_demand_the_session_s_compactions_get_a_readable_summary_at_the_first_read(
    sqlite_url: str,
) -> None:
    _run(sqlite_url, 16, "on_demand")  # five automatic compactions and the forced one


@pytest.mark.parametrize("kind", ["sqlite", "postgres"])
def test_a_compaction_of_a_subject_erased_by_another_process_is_not_sent_to_the_summarizer(
    kind: str, request: pytest.FixtureRequest
) -> None:
    """``here`` holds the session's subject key in its cache when ``there`` erases the
    subject; the SDK's forced compaction then hands its output to the session, whose
    readable summary would send the erased items to the summarizer before the write
    fence refused the record. The key table is read first: nothing is sent."""
    url = str(request.getfixturevalue(f"{kind}_url"))
    summarizer = ScriptedSummarizer()
    key = base64.b64encode(os.urandom(32)).decode()
    options = cl.Settings(database_url=url, cipher_key=key, run_policy=False)
    with (
        FakeOpenAIServer(default=Func(scripted_model), strict=True) as server,
        cl.Ledger.open(settings=options, summarizer=summarizer) as here,
        cl.Ledger.open(settings=options) as there,
    ):
        client = AsyncOpenAI(base_url=server.base_url, api_key="sk-test", max_retries=0)
        inner = LedgerSession("user-1", here, model="gpt-4.1-mini", subject="victim")
        session = OpenAIResponsesCompactionSession(
            "user-1", underlying_session=inner, client=client, model="gpt-4.1"
        )

        async def converse() -> None:
            await inner.add_items(
                [
                    {"role": "user", "content": "my card number is 4111-1111"},
                    {"role": "assistant", "content": "Noted."},
                ]
            )
            there.erase(subject="victim", reason="a request")
            with pytest.raises(cl.ConversationErasedError):
                await session.run_compaction({"force": True})

        asyncio.run(converse())
        assert len(server.requests_to("compact")) == 1  # the SDK's own call went out
        assert summarizer.calls == []
        with pytest.raises(cl.ConversationErasedError):
            here.context(inner.conversation_id)
