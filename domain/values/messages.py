"""Message value objects: OpenAI chat-completions messages, validated and frozen.

``Message.from_openai(d)`` accepts the request format of the Chat Completions API
and ``message.to_openai()`` gives the same dict back (keys the API treats as absent
when ``None`` are left out, except ``content`` on an assistant tool-call message,
which is always present, as the API returns it).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, field_validator, model_validator
from pydantic._internal._model_construction import ModelMetaclass

from contextledger.domain.values.errors import InvalidMessageError

__all__ = ["ROLES", "FunctionCall", "Message", "Role", "ToolCall", "message_from"]

Role = Literal["system", "developer", "user", "assistant", "tool"]
ROLES: tuple[str, ...] = ("system", "developer", "user", "assistant", "tool")

_FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_TEXT_ONLY_ROLES = ("system", "developer", "tool")
_MESSAGE_KEYS = {"role", "content", "name", "tool_calls", "tool_call_id"}
#: A string as ``json.dumps(..., ensure_ascii=False)`` writes it inside any document.
_encode_str = json.JSONEncoder(ensure_ascii=False).encode


class FunctionCall(BaseModel):
    """The function part of a tool call: a name and JSON-encoded arguments (kept verbatim)."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, ser_json_inf_nan="constants")

    name: str
    arguments: str

    @field_validator("name")
    @classmethod
    def _name_is_valid(cls, value: str) -> str:
        if not _FUNCTION_NAME.match(value):
            raise ValueError(f"function name {value!r} must match ^[A-Za-z0-9_-]{{1,64}}$")
        return value


class ToolCall(BaseModel):
    """One call of an assistant tool-call message."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True, ser_json_inf_nan="constants")

    id: str
    type: Literal["function"] = "function"
    function: FunctionCall

    @field_validator("id")
    @classmethod
    def _id_is_valid(cls, value: str) -> str:
        if not value or len(value) > 64:
            raise ValueError("tool call id must be 1 to 64 characters")
        return value


ContentPart = dict[str, Any]
Content = str | tuple[ContentPart, ...] | None


#: The validation context of a model built from a ``Message`` that is one already (a
#: command's new event): pydantic runs a model's ``after`` validator again for an
#: instance put into another model, and under this context ``Message`` skips its
#: shape check there -- the message was checked when it was built, and is frozen.
#: Only for fields whose every message is an instance: one given as a dict would be
#: built without the check.
MESSAGES_CHECKED: dict[str, Any] = {"messages": "checked"}


class _TypedErrors(ModelMetaclass):
    """``Message(...)`` raises ``InvalidMessageError``, not pydantic's error.

    Done where the class is called, not in an ``__init__`` of the model's: pydantic
    builds a message nested in another model (an event read from the log) through the
    model's own ``__init__`` when it has one, which validates the fields it was just
    given a second time."""

    def __call__(cls, *args: Any, **data: Any) -> Any:
        try:
            return super().__call__(*args, **data)
        except ValidationError as exc:
            raise _invalid(exc, data.get("role")) from exc


class Message(BaseModel, metaclass=_TypedErrors):
    """A chat message as the OpenAI Chat Completions API takes it."""

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")

    role: Role
    content: str | tuple[dict[str, Any], ...] | None = None
    name: str | None = None
    tool_calls: tuple[ToolCall, ...] | None = None
    tool_call_id: str | None = None

    @classmethod
    def model_validate(cls, obj: Any, *args: Any, **kwargs: Any) -> Message:
        """pydantic's ``model_validate``, its error an ``InvalidMessageError``."""
        try:
            return super().model_validate(obj, *args, **kwargs)
        except ValidationError as exc:
            raise _invalid(exc, obj.get("role") if isinstance(obj, dict) else None) from exc

    @classmethod
    def model_validate_json(cls, json_data: Any, *args: Any, **kwargs: Any) -> Message:
        """pydantic's ``model_validate_json``, its error an ``InvalidMessageError``."""
        try:
            return super().model_validate_json(json_data, *args, **kwargs)
        except ValidationError as exc:
            raise _invalid(exc, None) from exc

    @model_validator(mode="after")
    def _check_shape(self, info: ValidationInfo) -> Message:
        if info.context is MESSAGES_CHECKED:  # a message given as one, checked when built
            return self
        role = self.role
        if self.name is not None and (role == "tool" or not self.name or len(self.name) > 64):
            raise ValueError("name must be 1 to 64 characters, and tool messages take none")
        if self.tool_calls is not None:
            if role != "assistant":
                raise ValueError("only assistant messages carry tool_calls")
            if not self.tool_calls:
                raise ValueError("tool_calls must not be empty (leave it out instead)")
            ids = [call.id for call in self.tool_calls]
            if len(set(ids)) != len(ids):
                raise ValueError(f"tool call ids must be unique within a message: {ids}")
        if role == "tool":
            if not self.tool_call_id:
                raise ValueError("a tool message needs tool_call_id")
        elif self.tool_call_id is not None:
            raise ValueError("only tool messages carry tool_call_id")
        if self.content is None:
            if not (role == "assistant" and self.tool_calls):
                raise ValueError("content may be null only on an assistant message with tool_calls")
        elif isinstance(self.content, tuple):
            _check_parts(role, self.content)
        try:
            if isinstance(self.content, tuple) or self.tool_calls:
                self.canonical_json().encode("utf-8")
            else:  # the same check without building the JSON (pydantic runs it per copy)
                for text in (self.content, self.name, self.tool_call_id):
                    if text:
                        text.encode("utf-8")
        except UnicodeEncodeError:
            try:
                self.canonical_json().encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"text must be valid Unicode (a lone surrogate at position {exc.start})"
                ) from None
        return self

    # -- conversion ---------------------------------------------------------------

    @classmethod
    def from_openai(cls, data: Any) -> Message:
        """Validate an OpenAI-format dict; raise ``InvalidMessageError`` if it is not one."""
        if isinstance(data, Message):
            return data
        if not isinstance(data, dict):
            raise InvalidMessageError(f"a message must be a dict in OpenAI format, not {type(data).__name__}")
        unknown = set(data) - _MESSAGE_KEYS
        if unknown:
            raise InvalidMessageError(
                f"unknown message keys: {sorted(map(str, unknown))}",
                role=data.get("role") if isinstance(data.get("role"), str) else None,
                field=str(sorted(map(str, unknown))[0]),
            )
        role = data.get("role")
        if role not in ROLES:
            raise InvalidMessageError(
                f"role must be one of {', '.join(ROLES)}, not {str(role)[:40]!r}",
                field="role",
            )
        fields = dict(data)
        content = fields.get("content")
        if isinstance(content, list):
            fields["content"] = tuple(content)
        calls = fields.get("tool_calls")
        if isinstance(calls, list):
            fields["tool_calls"] = tuple(calls)
        return cls.model_validate(fields)  # its error an InvalidMessageError (see model_validate)

    def to_openai(self) -> dict[str, Any]:
        """The message as an OpenAI-format dict (a fresh, mutable copy)."""
        out: dict[str, Any] = {"role": self.role}
        if self.content is not None or self.tool_calls:
            out["content"] = (
                [dict(p) for p in self.content] if isinstance(self.content, tuple) else self.content
            )
        if self.name is not None:
            out["name"] = self.name
        if self.tool_calls:
            out["tool_calls"] = [
                {
                    "id": c.id,
                    "type": c.type,
                    "function": {"name": c.function.name, "arguments": c.function.arguments},
                }
                for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        return out

    # -- facts used by the policy -------------------------------------------------

    @property
    def text(self) -> str:
        """All the text of the message (content parts joined), for summaries and sizes."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(str(p.get("text", p.get("refusal", ""))) for p in self.content)

    @property
    def call_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.tool_calls) if self.tool_calls else ()

    def canonical_json(self) -> str:
        """A stable serialization, used in digests: ``to_openai()`` as JSON with sorted
        keys, compact separators and raw (not escaped) non-ASCII text."""
        content = self.content
        if (
            type(content) is str
            and self.name is None
            and self.tool_calls is None
            and self.tool_call_id is None
        ):
            # The common text message, spelled as json.dumps spells the dict (keys in
            # order: content, role), at a quarter of the cost: it runs on every append.
            return f'{{"content":{_encode_str(content)},"role":"{self.role}"}}'
        return json.dumps(self.to_openai(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _invalid(exc: ValidationError, role: Any) -> InvalidMessageError:
    """pydantic's first complaint as an ``InvalidMessageError`` naming the field."""
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ())]
    where = ".".join(loc) or "message"
    text = str(first["msg"]).removeprefix("Value error, ")
    return InvalidMessageError(
        f"invalid {role if isinstance(role, str) else ''} message: {where}: {text}".replace("  ", " "),
        role=role if isinstance(role, str) else None,
        field=loc[0] if loc else None,
    )


def _check_parts(role: str, parts: tuple[dict[str, Any], ...]) -> None:
    if not parts:
        raise ValueError("content parts must not be empty")
    for part in parts:
        kind = part.get("type") if isinstance(part, dict) else None
        if not isinstance(kind, str):
            raise ValueError("each content part needs a string 'type'")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise ValueError("a text part needs a string 'text'")
        elif kind == "refusal":
            if role != "assistant" or not isinstance(part.get("refusal"), str):
                raise ValueError("refusal parts belong to assistant messages and need 'refusal'")
        elif role in _TEXT_ONLY_ROLES or role == "assistant":
            raise ValueError(f"{role} messages take only text content parts, not {kind!r}")
        elif kind not in ("image_url", "input_audio", "file"):
            raise ValueError(f"unknown content part type {kind!r}")
        elif not isinstance(part.get(kind), dict):
            raise ValueError(f"a {kind} part needs an object under {kind!r}")


def message_from(data: Any) -> Message:
    """Accept a ``Message`` or an OpenAI-format dict."""
    return Message.from_openai(data)
