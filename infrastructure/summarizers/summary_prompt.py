"""The summary prompt every model-backed summarizer sends: one system instruction and
one user message holding the previous summary and a transcript of the new messages.

A result records ``PROMPT_VERSION`` as its provenance; changing the prompt's meaning
means a new version.
"""

from __future__ import annotations

from contextledger.application.shared.ports import SummaryRequest
from contextledger.domain.values.messages import Message

__all__ = ["PROMPT_VERSION", "SYSTEM_PROMPT", "render_transcript", "summary_prompt"]

PROMPT_VERSION = "extend-v1"

SYSTEM_PROMPT = (
    "You maintain the running summary of a conversation between a user and an assistant "
    "that uses tools. You are given the current summary and the messages that follow it. "
    "Rewrite the summary so that it also covers the new messages. Keep every decision, "
    "fact, name, number, user preference, open task and tool outcome (tool name and key "
    "result); drop pleasantries and repetition. Write plain text, concise, at most "
    "{max_tokens} tokens. Answer with the summary only."
)


def render_transcript(
    messages: tuple[Message, ...], from_position: int, *, positions: tuple[int, ...] | None = None
) -> str:
    """The new messages as a plain transcript: ``[position] role(name): text``, each at
    its transcript position (``positions``; without them, consecutive from
    ``from_position``)."""
    if positions is None:
        positions = tuple(range(from_position, from_position + len(messages)))
    lines = []
    for position, message in zip(positions, messages, strict=True):
        who = message.role + (f"({message.name})" if message.name else "")
        text = " ".join(message.text.split())
        if message.role == "tool":
            lines.append(f"[{position}] tool result for {message.tool_call_id}: {text}")
            continue
        if message.tool_calls:
            calls = "; ".join(f"calls {c.function.name}({c.function.arguments})" for c in message.tool_calls)
            text = f"{text} {calls}".strip()
        lines.append(f"[{position}] {who}: {text}")
    return "\n".join(lines)


def summary_prompt(request: SummaryRequest) -> tuple[str, str]:
    """``(system, user)``: the instruction and the previous summary plus only the newly
    covered messages."""
    positions = tuple(position for position, _ in request.positioned())
    user = (
        f"Current summary:\n{request.previous_summary or '(none)'}\n\n"
        f"New messages ({request.from_position}-{request.through_position}):\n"
        f"{render_transcript(request.messages, request.from_position, positions=positions)}"
    )
    return SYSTEM_PROMPT.format(max_tokens=request.max_summary_tokens), user
