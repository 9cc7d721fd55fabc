"""The steps the fork property tests drive a conversation with: a user turn, an
assistant turn, a tool-call group (its results answered) or one left open, a
retraction of the newest group, a summary of what is pending."""

from __future__ import annotations

import contextlib
import json
from uuid import UUID

import contextledger as cl
from contextledger.application.summaries.summarization import summarize_pending

__all__ = ["run_step"]


def run_step(ledger: cl.Ledger, cid: UUID, step: str, marker: str, n: int) -> None:
    """One step (``user``, ``assistant``, ``tools``, ``open``, ``retract``, or anything
    else: summarize what is pending), its text marked with ``marker``."""
    if step == "user":
        ledger.append(cid, {"role": "user", "content": f"{marker} user {n}"})
    elif step == "assistant":
        ledger.append(cid, {"role": "assistant", "content": f"{marker} answer {n}"})
    elif step in ("tools", "open"):
        calls = [
            {
                "id": f"{marker}-{n}-{i}",
                "type": "function",
                "function": {"name": "lookup", "arguments": json.dumps({"q": marker})},
            }
            for i in range(2)
        ]
        ledger.append(cid, {"role": "assistant", "content": None, "tool_calls": calls})
        if step == "tools":
            for call in calls:
                ledger.append(cid, {"role": "tool", "tool_call_id": call["id"], "content": f"{marker} {n}"})
    elif step == "retract":
        with contextlib.suppress(cl.InvalidEditError):  # nothing (of its own) left to pop
            ledger.pop(cid)
    else:
        summarize_pending(ledger, ledger.summarizer, cid, backoff=lambda attempt: 0.0)
