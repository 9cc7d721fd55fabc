"""The demo's run: the synthesized conversation played through a ledger, measured.

``run_demo(ledger, ...)`` feeds it through the ledger one message at a time. Each time
the model would be called (after a user message, and after the last result of a
tool-call group) it notes what the prompt costs with contextledger
(``totals().context_tokens``) and what sending the full history would cost. A summary
the policy asks for is let land before the next model call, as a real model call's
latency would allow; so the figures are the same on every run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from uuid import UUID

from contextledger.application.facade.ledger import Ledger
from contextledger.domain.values.policy import ReductionPolicy
from contextledger.infrastructure.demo.scenario import (
    DEMO_POLICY,
    DEMO_SYSTEM_PROMPT,
    synthesize_conversation,
)

__all__ = ["DEMO_SUBJECT", "DemoResult", "ModelCall", "minimum_summarizer_calls", "run_demo"]

#: The data subject the demo's conversation belongs to (``contextledger erase --subject``).
DEMO_SUBJECT = "demo-customer"


@dataclass(frozen=True)
class ModelCall:
    """One point where the model would be called."""

    index: int
    #: Position of the last message the model would see.
    position: int
    sent_tokens: int
    full_history_tokens: int
    summaries: int


@dataclass(frozen=True)
class DemoResult:
    """What ``run_demo`` measured."""

    conversation_id: UUID
    messages: int
    tool_messages: int
    calls: tuple[ModelCall, ...]
    appended_tokens: int
    summaries: int
    summarizer_calls: int
    summarizer_failures: int
    summarizer_input_tokens: int
    summarizer_output_tokens: int
    trigger_messages: int
    keep_messages: int
    final_context_tokens: int
    verified: bool
    verify_problem: str | None
    seconds: float
    #: The data subject of the conversation (erasing it erases the conversation).
    subject: str = DEMO_SUBJECT

    @property
    def sent_tokens(self) -> int:
        return sum(c.sent_tokens for c in self.calls)

    @property
    def full_history_sent_tokens(self) -> int:
        return sum(c.full_history_tokens for c in self.calls)

    @property
    def savings(self) -> float:
        full = self.full_history_sent_tokens
        return 0.0 if full == 0 else 1.0 - self.sent_tokens / full

    @property
    def minimum_summarizer_calls(self) -> int:
        return minimum_summarizer_calls(self.messages, self.trigger_messages, self.keep_messages)


def minimum_summarizer_calls(messages: int, trigger: int, keep: int) -> int:
    """The fewest summaries a message trigger allows: floor((N - keep) / (trigger - keep + 1)).
    A crossing fires when trigger + 1 messages are unsummarized and leaves keep of them,
    so each summary covers trigger - keep + 1 messages (docs/concepts.md)."""
    if messages <= trigger:
        return 0
    return (messages - keep) // (trigger - keep + 1)


def run_demo(
    ledger: Ledger,
    *,
    seed: int = 7,
    messages: int = 600,
    policy: ReductionPolicy = DEMO_POLICY,
    model: str = "gpt-4o-mini",
    progress: Callable[[int, int], None] | None = None,
    idle_timeout: float = 120.0,
    subject: str = DEMO_SUBJECT,
) -> DemoResult:
    """Play the synthesized conversation through ``ledger``, as data subject
    ``subject``'s, and measure it."""
    script = synthesize_conversation(seed=seed, messages=messages)
    began = time.perf_counter()
    cid = ledger.start(DEMO_SYSTEM_PROMPT, model=model, policy=policy, subject=subject)
    calls: list[ModelCall] = []
    open_calls = 0
    for index, message in enumerate(script):
        position = ledger.append(cid, message)
        if message.get("tool_calls"):
            open_calls = len(message["tool_calls"])
        elif message["role"] == "tool":
            open_calls -= 1
        model_called = message["role"] == "user" or (message["role"] == "tool" and open_calls == 0)
        if ledger.pending_summary(cid) is not None:
            # A model call takes seconds: the summary lands before the next one.
            ledger.wait_idle(idle_timeout)
        if model_called:
            totals = ledger.totals(cid)
            calls.append(
                ModelCall(
                    index=len(calls),
                    position=position,
                    sent_tokens=totals.context_tokens,
                    full_history_tokens=totals.full_history_tokens,
                    summaries=totals.summaries,
                )
            )
        if progress is not None:
            progress(index + 1, len(script))
    ledger.wait_idle(idle_timeout)
    totals = ledger.totals(cid)
    report = ledger.verify(cid)
    first = report.problems[0] if report.problems else None
    return DemoResult(
        conversation_id=cid,
        messages=totals.messages,
        tool_messages=sum(1 for m in script if m["role"] == "tool"),
        calls=tuple(calls),
        appended_tokens=totals.appended_tokens,
        summaries=totals.summaries,
        summarizer_calls=totals.summarizer_calls,
        summarizer_failures=totals.summarizer_failures,
        summarizer_input_tokens=totals.summarizer_input_tokens,
        summarizer_output_tokens=totals.summarizer_output_tokens,
        trigger_messages=policy.trigger_messages or 0,
        keep_messages=policy.keep_messages or 0,
        final_context_tokens=totals.context_tokens,
        verified=report.ok,
        verify_problem=None if first is None else f"version {first.version}: {first.problem}",
        seconds=time.perf_counter() - began,
        subject=subject,
    )
