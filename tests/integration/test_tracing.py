"""Optional OpenTelemetry spans: append, context and summarize carry the conversation
id, positions and token counts, never message content; off by default, and then
OpenTelemetry is not even imported."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from contextledger.application import Ledger, ReductionPolicy, Settings, SummaryRequest, SummaryResult
from contextledger.infrastructure.cli import main
from contextledger.infrastructure.readmodels import READ_MODEL_NAMES
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer
from contextledger.testing import FakeOpenAIServer, Status

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
    spans: InMemorySpanExporter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
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
    spans: InMemorySpanExporter,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
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
    assert (
        sum(
            s.attributes["contextledger.events"]
            for s in again  # type: ignore[index, misc]
            if s.name == "contextledger.project"
        )
        == 0
    )


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


def test_a_provider_error_quoting_the_conversation_reaches_spans_and_logs_as_its_class_and_status(
    spans: InMemorySpanExporter,
    fake_openai: FakeOpenAIServer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A provider's 400 quotes the message it refused: the span's status and exception
    event, and the log lines, name the error's class and status only; the words stay
    in the SummarizationFailed record, escaped and masked, for ``replay``."""
    quoted = {
        "error": {
            "message": f"Invalid content in messages[1]: '{SECRET} 0' \x1b[2J sk-proj-abc123DEF456ghi",
            "type": "invalid_request_error",
        }
    }
    fake_openai.script(Status(400, body=quoted), Status(400, body=quoted))
    summarizer = OpenAISummarizer(api_key="sk-test", base_url=fake_openai.base_url)
    settings = Settings(database_url="memory://", tracing=True, retry_base_seconds=0.01, poll_interval=0.01)
    caplog.set_level(logging.DEBUG, logger="contextledger")
    with Ledger.open(settings=settings, summarizer=summarizer) as ledger:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=4, keep_messages=1))
        for i in range(6):
            ledger.append(cid, {"role": "user", "content": f"{SECRET} {i}"})
        assert ledger.wait_idle(60)
        [failed, *_] = [e.data for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
    assert SECRET in failed["error"] and "sk-***" in failed["error"] and "\x1b" not in failed["error"]
    summarize = [s for s in spans.get_finished_spans() if s.name == "contextledger.summarize"]
    refused = [s for s in summarize if s.status.status_code is StatusCode.ERROR]
    assert refused and fake_openai.request_count >= 1
    for span in refused:
        assert span.status.description == "SummarizerRequestError (status 400)"
        [event] = [e for e in span.events if e.name == "exception"]
        assert dict(event.attributes or {}) == {
            "exception.type": "SummarizerRequestError",
            "exception.message": "SummarizerRequestError (status 400)",
        }
    for span in spans.get_finished_spans():
        shown = [span.status.description, *(span.attributes or {}).values()]
        shown += [value for event in span.events for value in (event.attributes or {}).values()]
        assert not any(SECRET in str(value) or "abc123" in str(value) for value in shown), span.name
    formatter = logging.Formatter()
    logged = [formatter.format(record) for record in caplog.records]
    assert any("not retryable" in line and "SummarizerRequestError (status 400)" in line for line in logged)
    assert not any(SECRET in line or "abc123" in line or "\x1b" in line for line in logged)


def test_a_custom_summarizers_exception_is_logged_at_warning_without_its_text(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A custom summarizer's exception is a retryable failure: its WARNING line names
    the exception's class, not its text."""
    calls: list[int] = []

    class Quoting:
        model = "quoting"

        def summarize(self, request: SummaryRequest) -> SummaryResult:
            calls.append(1)
            if len(calls) == 1:
                raise RuntimeError(f"cannot summarize {request.messages[0].text!r}")
            return SummaryResult(text="a summary", model=self.model, prompt_version="q1")

    settings = Settings(database_url="memory://", retry_base_seconds=0.01, poll_interval=0.01)
    caplog.set_level(logging.WARNING, logger="contextledger.summarization")
    with Ledger.open(settings=settings, summarizer=Quoting()) as ledger:
        cid = ledger.start("s", policy=ReductionPolicy(trigger_messages=4, keep_messages=1))
        for i in range(6):
            ledger.append(cid, {"role": "user", "content": f"{SECRET} {i}"})
        assert ledger.wait_idle(60)
        assert ledger.totals(cid).summaries == 1 and len(calls) == 2
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert "failed (attempt 1, retryable" in warning.getMessage() and "RuntimeError" in warning.getMessage()
    assert SECRET not in warning.getMessage()
