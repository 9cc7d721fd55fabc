"""Optional OpenTelemetry spans: append, context and summarize carry the conversation
id, positions and token counts, never message content; off by default, and then
OpenTelemetry is not even imported."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from contextledger.application import Ledger, ReductionPolicy, Settings
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.readmodels import READ_MODEL_NAMES

EXPORTER = InMemorySpanExporter()
SECRET = "the launch code is 0000"


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def test_append_context_and_summarize_are_spans_with_ids_positions_and_tokens(
    spans: InMemorySpanExporter,
) -> None:
    settings = Settings(database_url="memory://", tracing=True)
    with Ledger.open(settings=settings) as ledger:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=4, keep_messages=1))
        for i in range(6):
            ledger.append(cid, {"role": "user", "content": f"{SECRET} {i}"})
        ledger.context(cid)
        assert ledger.wait_idle(60)
    finished = spans.get_finished_spans()
    names = {s.name for s in finished}
    assert {"contextledger.append", "contextledger.context", "contextledger.summarize"} <= names
    append = [s for s in finished if s.name == "contextledger.append"]
    assert [s.attributes["contextledger.position"] for s in append] == list(range(6))  # type: ignore[index]
    assert {s.attributes["contextledger.conversation_id"] for s in append} == {str(cid)}  # type: ignore[index]
    context = next(s for s in finished if s.name == "contextledger.context")
    assert context.attributes["contextledger.context_tokens"] > 0  # type: ignore[index, operator]
    summarize = next(s for s in finished if s.name == "contextledger.summarize")
    assert summarize.attributes["contextledger.from_position"] == 0  # type: ignore[index]
    for span in finished:
        assert all(SECRET not in str(value) for value in (span.attributes or {}).values())


def _fill(url: str) -> None:
    with Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=4, keep_messages=1))
        for i in range(6):
            ledger.append(cid, {"role": "user", "content": f"{SECRET} {i}"})


def test_rebuild_is_a_span_per_read_model_with_the_events_applied(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'traced.db'}"
    _fill(url)
    monkeypatch.setenv("CONTEXTLEDGER_TRACING", "1")
    with Ledger.open(url, run_policy=False) as ledger:
        head = ledger.recorder.max_notification_id()
    spans.clear()
    assert main(["rebuild", "--database", url, "--json"]) == 0
    applied = json.loads(capsys.readouterr().out)["rebuilt"]
    rebuilds = [s for s in spans.get_finished_spans() if s.name == "contextledger.rebuild"]
    assert [s.attributes["contextledger.projection"] for s in rebuilds] == list(READ_MODEL_NAMES)  # type: ignore[index]
    assert applied["transcript"] == 6
    for span in rebuilds:
        name = span.attributes["contextledger.projection"]  # type: ignore[index]
        assert span.attributes["contextledger.events"] == applied[name]  # type: ignore[index]
        assert span.attributes["contextledger.through_notification"] == head  # type: ignore[index]
        assert all(SECRET not in str(value) for value in (span.attributes or {}).values())


def test_the_workers_runners_are_traced(
    spans: InMemorySpanExporter, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"sqlite:///{tmp_path / 'worker.db'}"
    _fill(url)
    monkeypatch.setenv("CONTEXTLEDGER_TRACING", "1")
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    spans.clear()
    assert main(["worker", "--once", "--database", url]) == 0
    finished = spans.get_finished_spans()
    summarize = [s for s in finished if s.name == "contextledger.summarize"]
    assert summarize and summarize[0].attributes["contextledger.from_position"] == 0  # type: ignore[index]
    project = [s for s in finished if s.name == "contextledger.project"]
    assert project and project[0].attributes["contextledger.after_notification"] == 0  # type: ignore[index]
    assert sum(s.attributes["contextledger.events"] for s in project) > 0  # type: ignore[index, misc]
    for span in finished:
        assert all(SECRET not in str(value) for value in (span.attributes or {}).values())
    # A second run finds nothing new: nothing summarized, no event projected again.
    spans.clear()
    assert main(["worker", "--once", "--database", url]) == 0
    again = spans.get_finished_spans()
    assert not [s for s in again if s.name == "contextledger.summarize"]
    assert sum(s.attributes["contextledger.events"] for s in again  # type: ignore[index, misc]
               if s.name == "contextledger.project") == 0


def test_with_tracing_off_nothing_of_opentelemetry_is_imported() -> None:
    code = (
        "import sys, contextledger as cl\n"
        "with cl.Ledger.open('memory://') as ledger:\n"
        "    cid = ledger.start('s'); ledger.append(cid, {'role': 'user', 'content': 'hi'}); ledger.context(cid)\n"
        "print(sorted(m for m in sys.modules if m.startswith('opentelemetry')))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
