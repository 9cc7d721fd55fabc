"""OpenAI Chat Completions in: message params, ``Message`` values and the openai
SDK's reply objects, decoded in one pass.

What is accepted (the SDK is never imported: its objects are recognised by their
``model_dump``):

- A ``Message``: taken as it is.
- A chat-completions message dict (or any mapping), or the SDK's
  ``ChatCompletionMessage`` (or its ``model_dump()``). The fields only replies carry
  are dropped: ``annotations`` and ``parsed`` always, ``refusal``, ``audio``,
  ``function_call`` and ``reasoning_content`` when they are None (a refusal text
  becomes a ``refusal`` content part). Any other field is refused with
  ``InvalidMessageError(field=...)``.
- A ``ChatCompletion`` (or its dump): its first choice's message, and the usage the
  provider reported.

One pass: the fields are read once, the response-only ones dropped and the unknown
ones noted on the way, lists become the tuples ``Message`` holds, and the ``Message``
is built (and so validated) once. The checks run in a fixed order, so a message with
several faults always reports the same one: a refusal beside content, then a
response-only field with a value (the first by name), then unknown fields, then the
role, then ``Message``'s own rules.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from contextledger.application.formats.base import Decoded, ProviderUsage, sdk_dump
from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import ROLES, Message

__all__ = [
    "ALWAYS_DROPPED",
    "DROPPED_WHEN_NONE",
    "OPENAI_CHAT",
    "OpenAIChat",
    "chat_message",
    "message_of",
    "plain_text_message",
]

#: Response-only message fields that never go back to the API.
ALWAYS_DROPPED = frozenset({"annotations", "parsed"})
#: Response-only message fields dropped when they are None (refused otherwise).
DROPPED_WHEN_NONE = frozenset({"refusal", "audio", "function_call", "reasoning_content"})

_MESSAGE_KEYS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
#: Message fields whose None means "absent" (left out, as the API leaves them out).
_NONE_IS_ABSENT = frozenset({"tool_calls", "name", "tool_call_id"})
#: Message fields given as lists that ``Message`` holds as tuples.
_LISTED = frozenset({"content", "tool_calls"})
#: Roles whose ``{"role", "content": str}`` dict is a whole message (a tool message
#: needs its ``tool_call_id``).
_TEXT_ROLES = frozenset({"system", "developer", "user", "assistant"})


def plain_text_message(obj: Any) -> Message | None:
    """The usual turn, ``{"role": ..., "content": "..."}``, as a ``Message`` (None for
    anything else): nothing to drop or convert, so it is validated as a ``Message`` at
    once, with the same checks and errors as the general path."""
    if type(obj) is dict and len(obj) == 2:
        role, content = obj.get("role"), obj.get("content")
        if type(content) is str and type(role) is str and role in _TEXT_ROLES:
            return Message(role=role, content=content)
    return None


def _dump(obj: Any) -> Any:
    return sdk_dump(obj, keep=Message, exclude_unset=False)


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


def message_of(data: Mapping[str, Any]) -> Message:
    """The ``Message`` a chat-completions message mapping (a param, or a reply's
    message dumped) stands for, in one pass; ``InvalidMessageError`` if it is none."""
    fields: dict[str, Any] = {}
    refusal: Any = None
    response_only: list[str] = []  # dropped-when-None fields that hold a value
    unknown: list[Any] = []
    for key, value in data.items():
        if key in _MESSAGE_KEYS:
            if value is None and key in _NONE_IS_ABSENT:
                continue
            fields[key] = tuple(value) if key in _LISTED and isinstance(value, list) else value
        elif key in ALWAYS_DROPPED:
            continue
        elif key == "refusal":
            refusal = value
        elif key in DROPPED_WHEN_NONE:
            if value is not None:
                response_only.append(key)
        else:
            unknown.append(key)
    role = fields.get("role")
    if refusal is not None:
        if fields.get("content") is not None or not isinstance(refusal, str):
            raise InvalidMessageError(
                "a message with both content and a refusal cannot be sent back",
                role=str(role),
                field="refusal",
            )
        fields["content"] = ({"type": "refusal", "refusal": refusal},)
    if response_only:
        name = min(response_only)
        raise InvalidMessageError(
            f"the response field {name!r} cannot be sent back to the model", role=str(role), field=name
        )
    if unknown:
        names = sorted(map(str, unknown))
        raise InvalidMessageError(
            f"unknown message keys: {names}", role=role if isinstance(role, str) else None, field=names[0]
        )
    if role not in ROLES:
        raise InvalidMessageError(
            f"role must be one of {', '.join(ROLES)}, not {str(role)[:40]!r}", field="role"
        )
    return Message(**fields)


def chat_message(obj: Any) -> tuple[Message, ProviderUsage | None]:
    """The message ``obj`` stands for, and the usage the provider reported when ``obj``
    is a whole completion; ``InvalidMessageError`` if it is not a chat message."""
    if isinstance(obj, Message):
        return obj, None
    plain = plain_text_message(obj)
    if plain is not None:
        return plain, None
    data = _dump(obj)
    if not isinstance(data, Mapping):
        raise InvalidMessageError(f"a message must be a dict in OpenAI format, not {type(data).__name__}")
    if not _is_completion(data):
        return message_of(data), None
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], Mapping):
        raise InvalidMessageError("the completion has no choices", field="choices")
    message = _dump(choices[0].get("message"))
    if not isinstance(message, Mapping):
        raise InvalidMessageError("the completion's first choice has no message", field="message")
    return message_of(message), _usage(data)


class OpenAIChat:
    """The Chat Completions adapter, and the default of ``decode``: what no other
    adapter claims is decoded (or refused) as a chat message."""

    name = "openai"

    def accepts(self, obj: Any) -> bool:
        """A ``Message``, a mapping with a ``role`` and no ``type`` (a Responses item has
        one), a completion's dump, or an SDK object with the fields of a message or of a
        completion."""
        if isinstance(obj, Message):
            return True
        if isinstance(obj, Mapping):
            return ("role" in obj and "type" not in obj) or _is_completion(obj)
        if callable(getattr(obj, "model_dump", None)):
            if hasattr(obj, "choices"):
                return not hasattr(obj, "role")
            return hasattr(obj, "role") and hasattr(obj, "tool_calls") and not hasattr(obj, "type")
        return False

    def decode(self, obj: Any) -> Decoded:
        message, usage = chat_message(obj)
        return Decoded.one(message, usage=usage)


#: The one instance the registry holds.
OPENAI_CHAT = OpenAIChat()
