"""What ``append`` takes: OpenAI-format dicts, ``Message``, and the openai SDK's
response objects, converted without importing the SDK (duck typing on ``model_dump``).

- A ``ChatCompletionMessage`` (or its ``model_dump()``) becomes a ``Message``. The
  fields only responses carry are dropped: ``annotations`` and ``parsed`` always,
  ``refusal``, ``audio`` and ``function_call`` when they are None (a refusal text
  becomes a ``refusal`` content part). Any other field is refused with
  ``InvalidMessageError(field=...)``.
- A ``ChatCompletion`` (or its dump) gives its first choice's message and the usage
  the provider reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from contextledger.application.formats.base import ProviderUsage
from contextledger.domain.errors import InvalidMessageError
from contextledger.domain.messages import Message

__all__ = ["ALWAYS_DROPPED", "DROPPED_WHEN_NONE", "Inbound", "ProviderUsage", "inbound"]

#: Response-only message fields that never go back to the API.
ALWAYS_DROPPED = frozenset({"annotations", "parsed"})
#: Response-only message fields dropped when they are None (refused otherwise).
DROPPED_WHEN_NONE = frozenset({"refusal", "audio", "function_call", "reasoning_content"})


@dataclass(frozen=True)
class Inbound:
    """A message to append, with the provider's usage when a whole completion came in."""

    message: Message
    usage: ProviderUsage | None = None


def _dump(obj: Any) -> Any:
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, Message):
        try:
            return dump(mode="json", exclude_unset=False)
        except TypeError:
            return dump()
    return obj


def _is_completion(data: Mapping[str, Any]) -> bool:
    return "choices" in data and "role" not in data


def _usage(data: Mapping[str, Any]) -> ProviderUsage | None:
    usage = data.get("usage")
    if not isinstance(usage, Mapping):
        return None
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not isinstance(prompt, int) or not isinstance(completion, int):
        return None
    return ProviderUsage(prompt_tokens=prompt, completion_tokens=completion)


def _clean(data: Mapping[str, Any]) -> dict[str, Any]:
    fields = {k: v for k, v in data.items() if k not in ALWAYS_DROPPED}
    refusal = fields.pop("refusal", None)
    if refusal is not None:
        if fields.get("content") is not None or not isinstance(refusal, str):
            raise InvalidMessageError(
                "a message with both content and a refusal cannot be sent back",
                role=str(fields.get("role")),
                field="refusal",
            )
        fields["content"] = [{"type": "refusal", "refusal": refusal}]
    for name in DROPPED_WHEN_NONE - {"refusal"}:
        if name in fields:
            if fields[name] is not None:
                raise InvalidMessageError(
                    f"the response field {name!r} cannot be sent back to the model",
                    role=str(fields.get("role")),
                    field=name,
                )
            del fields[name]
    for optional in ("tool_calls", "name", "tool_call_id"):
        if optional in fields and fields[optional] is None:
            del fields[optional]
    return fields


#: Roles whose ``{"role", "content": str}`` dict is a whole message (a tool message
#: needs its ``tool_call_id``).
_TEXT_ROLES = frozenset({"system", "developer", "user", "assistant"})


def inbound(obj: Any) -> Inbound:
    """Convert whatever ``append`` was given into a ``Message`` (and usage, if any)."""
    if isinstance(obj, Message):
        return Inbound(obj)
    if type(obj) is dict and len(obj) == 2:
        # The usual turn, {"role": ..., "content": "..."}: nothing to drop or convert,
        # so it is validated as a Message at once (the same checks and errors).
        role, content = obj.get("role"), obj.get("content")
        if type(content) is str and type(role) is str and role in _TEXT_ROLES:
            return Inbound(Message(role=role, content=content))
    data = _dump(obj)
    if isinstance(data, Mapping) and _is_completion(data):
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
            raise InvalidMessageError("the completion has no choices", field="choices")
        message = _dump(choices[0].get("message"))
        if not isinstance(message, Mapping):
            raise InvalidMessageError("the completion's first choice has no message", field="message")
        return Inbound(Message.from_openai(_clean(message)), _usage(data))
    if isinstance(data, Mapping):
        return Inbound(Message.from_openai(_clean(data)))
    return Inbound(Message.from_openai(data))
