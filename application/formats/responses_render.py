"""The working memory as an OpenAI Responses ``responses.create`` request:
``instructions`` and ``input``.

``render_responses(conversation)`` gives ``{"instructions": ..., "input": [...]}``
(``instructions`` only when there is a system prompt), for
``client.responses.create(model=..., **ctx)``:

- The system prompt is ``instructions`` (with ``summary_placement="system_prompt"``
  the summaries join it, as they join the chat format's system message).
- Each summary is a ``system`` message item standing where the chat format puts it
  (``summary_placement="user_message"``, or ``summary="user"``: a ``user`` item). A
  compaction OpenAI made (a native summary) is sent as it came, its opaque
  ``compaction`` item in place of the range it covers; Anthropic's compaction is sent
  as its summary text.
- A message appended as Responses items (``append_items``, a ``Response`` reply, an
  agent session) comes back as the very items it was appended as: reasoning items
  with their encrypted content, function calls with their ids, hosted tool calls.
  Any other message is converted from its chat form (``domain.values.items``): an assistant
  message with calls is its text item and one ``function_call`` item per call, a tool
  message a ``function_call_output``.
- A tool result the policy reduced (an old one, a hidden one) is its
  ``function_call_output`` with the placeholder text as ``output``, under the same
  ``call_id``.
- The same messages as the chat format, in the same order: whole tool-call groups
  only (an unanswered call stays out until it is answered), the ``max_context_tokens``
  cap applied. So every ``function_call_output`` answers a ``function_call`` before
  it and every call is answered, as the API requires.
"""

from __future__ import annotations

from typing import Any, Literal

from contextledger.application.formats.items import entry_items
from contextledger.application.formats.native import sendable
from contextledger.domain.conversation import Conversation
from contextledger.domain.values.items import Item
from contextledger.domain.values.reduction import SummaryLayer, summary_message

__all__ = ["render_responses"]


def render_responses(
    conversation: Conversation, *, summary: Literal["system", "user", "assistant"] = "system"
) -> dict[str, Any]:
    """The working memory of ``conversation`` as ``{"instructions": ..., "input": [...]}``
    (see the module docstring); ``summary="user"`` sends summaries as user items,
    ``summary="assistant"`` as assistant items."""
    s = conversation.state
    placement = s.policy.summary_placement
    layers = list(s.summaries)
    instructions = s.system_prompt
    if placement == "system_prompt" and layers and summary == "system":
        parts = [] if s.system_prompt is None else [s.system_prompt]
        parts.extend(_summary_text(layer) for layer in layers if layer.native != "responses")
        instructions = "\n\n".join(parts)
        layers = [layer for layer in layers if layer.native == "responses"]
    role = "system"
    if placement == "user_message" or summary == "user":
        role = "user"
    elif placement == "assistant_message" or summary == "assistant":
        role = "assistant"

    def summary_items(layer: SummaryLayer) -> list[Item]:
        if layer.native == "responses" and layer.payload:  # OpenAI's own compaction, as it came
            return sendable(layer.payload)
        return [{"type": "message", "role": role, "content": _summary_text(layer)}]

    items: list[Item] = []
    for entry in conversation.visible_entries():
        while layers and layers[0].from_position < entry.position:
            items.extend(summary_items(layers.pop(0)))
        items.extend(entry_items(conversation, entry))
    for layer in layers:
        items.extend(summary_items(layer))
    rendered: dict[str, Any] = {"input": items}
    if instructions is not None:
        rendered = {"instructions": instructions, "input": items}
    return rendered


def _summary_text(layer: SummaryLayer) -> str:
    return summary_message(layer.from_position, layer.through_position, layer.text).text
