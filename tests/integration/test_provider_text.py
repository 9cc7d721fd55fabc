"""A provider's error text is stored and printed escaped, with anything like an API
key masked: a 400 body holding a terminal escape and a partial key, through the real
openai client against the fake server, a worker and ``replay``."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import contextledger as cl
from contextledger.domain.values.redaction import mask_secrets, provider_text
from contextledger.infrastructure.cli import main
from contextledger.testing import FakeOpenAIServer, Reply, Status

KEY = "sk-proj-abc123DEF456ghi789JKL"
PARTIAL = "sk-proj-abc123********************xyz9"
BODY = {
    "error": {
        "message": f"Incorrect API key provided: \x1b[2J\x1b[31m{PARTIAL}\x1b[0m.\u202e "
        "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.payload",
        "type": "invalid_request_error",
    }
}
POLICY = cl.ReductionPolicy(trigger_messages=10, keep_messages=2, max_summary_tokens=200)


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (f"key {KEY} refused", "key sk-*** refused"),
        (f"\x1b[31m{PARTIAL}\x1b[0m", "\\x1b[31msk-***\\x1b[0m"),
        ("Authorization: Bearer abc.def.ghi-123", "Authorization: Bearer ***"),
        ('{"api_key": "hunter2-secret"}', '{"api_key": "***"}'),
        ("key=AIzaSyA1234567890abcdefghijklmnopqrstu", "key=AIza***"),
        ("line one\nline\ttwo\r\n", "line one line two"),
        ("over\u202eridden\u200b", "over\\u202eridden\\u200b"),
        ("a task-force and a desk-lamp", "a task-force and a desk-lamp"),
    ],
)
def test_provider_text_escapes_control_characters_and_masks_secrets(raw: str, shown: str) -> None:
    assert provider_text(raw) == shown
    assert KEY not in mask_secrets(f"x {KEY} y")


def test_a_refusal_body_with_an_escape_and_a_partial_key_is_stored_and_printed_safely(
    fake_openai: FakeOpenAIServer,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with cl.Ledger.open(url, run_policy=False) as ledger:
        cid = ledger.start("You are a booking assistant.", policy=POLICY)
        for i in range(11):
            ledger.append(cid, {"role": "user" if i % 2 == 0 else "assistant", "content": f"seat {i}"})
    fake_openai.script(Status(400, body=BODY), Reply("never asked for"))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", fake_openai.base_url)
    caplog.set_level(logging.WARNING, logger="contextledger.summarization")
    assert main(["worker", "--once", "--database", url]) == 0
    assert fake_openai.request_count == 1

    with cl.Ledger.open(url, read_only=True) as ledger:
        [failure] = [e.data for e in ledger.replay(cid) if e.kind == "SummarizationFailed"]
        assert ledger.summaries(cid)[0].model == "offline-extractive"  # the fallback took over
    stored = failure["error"]
    assert "Incorrect API key provided" in stored and "\\x1b[31m" in stored and "sk-***" in stored
    assert "\x1b" not in stored and "\u202e" not in stored
    assert "abc123" not in stored and "eyJhbGciOiJIUzI1NiJ9" not in stored

    logged = "\n".join(record.getMessage() for record in caplog.records)
    # The log names the error's class and status; the provider's words stay in the record.
    assert "not retryable" in logged and "SummarizerRequestError (status 400)" in logged
    assert "Incorrect API key" not in logged
    assert "\x1b" not in logged and "abc123" not in logged and KEY not in logged

    capsys.readouterr()
    assert main(["replay", str(cid), "--database", url]) == 0
    printed = capsys.readouterr().out
    assert "SummarizationFailed" in printed and "\x1b" not in printed and "abc123" not in printed
