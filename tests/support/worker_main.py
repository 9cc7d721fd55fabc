"""A summarization worker process for fault tests (run with ``python -m``).

    python -m tests.support.worker_main URL BASE_URL [--pause-after-answer MARKER]

It follows the ledger's log on URL and summarizes with the real OpenAI client
against BASE_URL. With ``--pause-after-answer`` it writes MARKER as soon as the
model has answered and then stalls before recording, so a test can SIGKILL it in
exactly that window.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from contextledger.application import Ledger, Settings, SummarizationRunner, SummaryRequest, SummaryResult
from contextledger.infrastructure.summarizers.openai_summarizer import OpenAISummarizer


class PauseAfterAnswer:
    def __init__(self, inner: OpenAISummarizer, marker: Path) -> None:
        self.inner = inner
        self.model = inner.model
        self.marker = marker

    def summarize(self, request: SummaryRequest) -> SummaryResult:
        result = self.inner.summarize(request)
        self.marker.write_text(f"{request.from_position}-{request.through_position}")
        time.sleep(3600)  # killed here
        return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("url")
    parser.add_argument("base_url")
    parser.add_argument("--pause-after-answer", type=Path)
    args = parser.parse_args()
    ledger = Ledger(Settings(database_url=args.url, run_policy=False, poll_interval=0.02,
                             retry_base_seconds=0.05, retry_max_seconds=0.5))
    summarizer = OpenAISummarizer(model="gpt-4o-mini", api_key="sk-test-worker", base_url=args.base_url,
                                  timeout=10)
    ledger.attach(SummarizationRunner(
        ledger, PauseAfterAnswer(summarizer, args.pause_after_answer) if args.pause_after_answer else summarizer
    ))
    while True:
        time.sleep(0.1)


if __name__ == "__main__":
    main()
