"""Google Gemini's ``Content`` (google-genai's ``contents``) as chat messages.

The adapter never imports google-genai: an SDK object is read through its
``model_dump(mode="json", exclude_none=True)``; a dict is taken in the same JSON form
(snake_case keys, camelCase REST keys accepted, bytes as URL-safe base64 text as the
SDK's dump gives them).

What one ``Content`` decodes to:

- ``role="model"``: one assistant message. Its text is the non-thought text parts
  joined (as ``response.text`` joins them); each ``function_call`` part is a tool
  call (``arguments`` the JSON of ``args``); ``executable_code`` and
  ``code_execution_result`` parts are shown as text. Thought parts and
  ``thought_signature`` are kept only in the original.
- ``role="user"``: one ``tool`` message per ``function_response`` part (its content
  the JSON of ``response``), in order, then one user message for the other parts if
  there are any: text parts as text, ``inline_data`` as a data URI (``image_url`` for
  images, ``input_audio`` for wav and mp3, ``file`` otherwise), ``file_data`` as an
  ``image_url`` for images and a text note otherwise. A single text part is plain
  text.
- A ``GenerateContentResponse`` (or its dump): its first candidate's content, with
  ``usage_metadata`` as the usage (``prompt_token_count``; ``candidates_token_count``
  plus ``thoughts_token_count`` as completion tokens; ``cached_content_token_count``
  as cache reads).

The first chat message carries the original ``{"format": "gemini", "version": 1,
"content": <the Content's JSON>, "call_ids": [...]}``; the others carry the marker
``{"format": "gemini", "version": 1, "continues": true}``. ``call_ids`` holds, for
each part, the chat tool-call id its ``function_call`` or ``function_response``
stands under (None for other parts); the ids are kept beside ``content``, never in
it, so the Content renders back exactly as it came (``gemini_render``).

Call ids. Gemini may send a ``function_call`` without an ``id``, and answer one with
a ``function_response`` naming only the function. The chat form needs an id unique
in the conversation, and each tool message must name the call it answers:

- a ``function_call`` with an ``id`` keeps it; one without gets a fresh
  ``call_<32 hex digits>`` (``new_id`` makes them, for reproducible tests);
- a ``function_response`` with an ``id`` answers that call; one without answers the
  oldest unanswered call of the same name among ``open_calls`` (the conversation's
  unanswered calls, oldest first: ``ledger.store.read(cid, open_calls_of)``, or
  ``unanswered_calls`` of its transcript; ``Ledger.context`` leaves an open group
  out), each call answered at most once. A response that matches no open call is refused with
  ``InvalidMessageError`` (``open_calls`` lists what was open).
"""

from __future__ import annotations

import base64
import binascii
import json
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from contextledger.application.formats.base import Decoded, ProviderUsage
from contextledger.domain.conversation import Conversation
from contextledger.domain.values.errors import InvalidMessageError
from contextledger.domain.values.messages import FunctionCall, Message, ToolCall

__all__ = [
    "FORMAT",
    "VERSION",
    "GeminiAdapter",
    "content_json",
    "is_gemini_original",
    "open_calls_of",
    "unanswered_calls",
]

#: The ``"format"`` of the originals this adapter stores.
FORMAT = "gemini"
#: Their ``"version"``: the layout described in this module's docstring.
VERSION = 1

ROLES = ("user", "model")
#: The part fields that carry data (a part holds one of them).
DATA_KEYS = (
    "text",
    "inline_data",
    "file_data",
    "function_call",
    "function_response",
    "executable_code",
    "code_execution_result",
)
#: Part fields that qualify the data (kept in the original only).
MODIFIER_KEYS = frozenset(
    {"thought", "thought_signature", "video_metadata", "media_resolution", "part_metadata"}
)
_CAMEL = {
    "inlineData": "inline_data",
    "fileData": "file_data",
    "functionCall": "function_call",
    "functionResponse": "function_response",
    "executableCode": "executable_code",
    "codeExecutionResult": "code_execution_result",
    "thoughtSignature": "thought_signature",
    "videoMetadata": "video_metadata",
    "mediaResolution": "media_resolution",
    "partMetadata": "part_metadata",
    "mimeType": "mime_type",
    "fileUri": "file_uri",
    "displayName": "display_name",
    "willContinue": "will_continue",
    "partialArgs": "partial_args",
}
#: The objects inside a part whose own keys are normalized (never ``args``/``response``).
_NESTED = (frozenset(DATA_KEYS) - {"text"}) | {"video_metadata"}
_AUDIO = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mp3": "mp3", "audio/mpeg": "mp3"}

OpenCall = tuple[str, str]


def _bad(
    text: str, *, role: str | None = None, field: str | None = None, **context: Any
) -> InvalidMessageError:
    return InvalidMessageError(text, role=role, field=field, **context)


def _misplaced(index: int, role: str, key: str) -> InvalidMessageError:
    """A part of a kind the turn's role cannot send (a call from the user, a response
    from the model)."""
    return _bad(f"parts[{index}]: a {role} turn cannot hold a {key}", role=role, field=key)


def _dump(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return obj
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and type(obj).__module__.startswith("google.genai"):
        return dump(mode="json", exclude_none=True)
    return None


def _is_response(data: Mapping[str, Any]) -> bool:
    return "candidates" in data and "role" not in data and "choices" not in data


def _value(value: Any, where: str) -> Any:
    """``value`` as JSON: bytes as URL-safe base64 text (the SDK's dump), None dropped
    from objects; anything else must already be JSON."""
    if isinstance(value, bytes | bytearray):
        return base64.urlsafe_b64encode(bytes(value)).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): _value(v, where) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [_value(v, where) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    raise _bad(f"{where} holds a {type(value).__name__}, which is not JSON", field=where)


def _keys(obj: Mapping[str, Any]) -> dict[str, Any]:
    return {_CAMEL.get(str(k), str(k)): v for k, v in obj.items() if v is not None}


def _part(raw: Any, index: int, role: str) -> dict[str, Any]:
    if not isinstance(raw, Mapping):
        raise _bad(f"parts[{index}] is a {type(raw).__name__}, not an object", role=role, field="parts")
    part = _keys(raw)
    unknown = sorted(set(part) - set(DATA_KEYS) - MODIFIER_KEYS)
    if unknown:
        raise _bad(f"parts[{index}] has unknown fields {unknown}", role=role, field=unknown[0])
    data = [key for key in DATA_KEYS if key in part]
    if len(data) != 1:
        raise _bad(
            f"parts[{index}] must hold exactly one of {', '.join(DATA_KEYS)}, not {data or 'none'}",
            role=role,
            field="parts",
        )
    out: dict[str, Any] = {}
    for key, value in part.items():
        if key in _NESTED:
            if not isinstance(value, Mapping):
                raise _bad(f"parts[{index}].{key} must be an object", role=role, field=key)
            value = _keys(value)
        out[key] = _value(value, f"parts[{index}].{key}")
    if "text" in out and not isinstance(out["text"], str):
        raise _bad(f"parts[{index}].text must be a string", role=role, field="text")
    return out


def content_json(obj: Any) -> dict[str, Any]:
    """A Gemini ``Content`` (SDK object or dict) as the JSON stored in the original:
    snake_case keys, no None values, bytes as URL-safe base64. ``InvalidMessageError``
    if it is not a Content with role ``user`` or ``model`` and at least one part."""
    data = _dump(obj)
    if not isinstance(data, Mapping):
        raise _bad(f"a Gemini Content must be an object, not {type(obj).__name__}")
    role = data.get("role")
    if role not in ROLES:
        raise _bad(f"a Gemini Content needs role 'user' or 'model', not {str(role)[:40]!r}", field="role")
    unknown = sorted(set(map(str, data)) - {"role", "parts"})
    if unknown:
        raise _bad(f"a Gemini Content has unknown fields {unknown}", role=role, field=unknown[0])
    parts = data.get("parts")
    if not isinstance(parts, list | tuple) or not parts:
        raise _bad("a Gemini Content needs a non-empty list of parts", role=role, field="parts")
    return {"parts": [_part(p, i, role) for i, p in enumerate(parts)], "role": role}


def is_gemini_original(original: Mapping[str, Any] | None) -> bool:
    """True for an original this adapter wrote (the head or a ``continues`` marker)."""
    return original is not None and original.get("format") == FORMAT and original.get("version") == VERSION


def unanswered_calls(messages: Iterable[Mapping[str, Any] | Message]) -> list[OpenCall]:
    """The calls of chat ``messages`` (e.g. ``ledger.context(cid)``) no tool message has
    answered yet, oldest first, as ``(call_id, function_name)``: ``open_calls`` for
    ``GeminiAdapter.decode``."""
    open_calls: dict[str, str] = {}
    for item in messages:
        message = Message.from_openai(item)
        for call in message.tool_calls or ():
            open_calls[call.id] = call.function.name
        if message.role == "tool" and message.tool_call_id is not None:
            open_calls.pop(message.tool_call_id, None)
    return list(open_calls.items())


def open_calls_of(conversation: Conversation) -> list[OpenCall]:
    """The calls the conversation waits for results of, in order, as ``(call_id, name)``."""
    state = conversation.state
    return [(call_id, state.group_calls.get(call_id, "")) for call_id in state.open_calls]


def _new_id() -> str:
    return f"call_{uuid.uuid4().hex}"


def _args_json(call: Mapping[str, Any], index: int) -> str:
    args = call.get("args", {})
    if not isinstance(args, Mapping):
        raise _bad(
            f"parts[{index}].function_call.args must be an object", role="model", field="function_call"
        )
    return json.dumps(args, ensure_ascii=False)


def _name(obj: Mapping[str, Any], index: int, role: str, key: str) -> str:
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"parts[{index}].{key} needs a name", role=role, field=key)
    return name


def _code_text(part: Mapping[str, Any]) -> str | None:
    code = part.get("executable_code")
    if code is not None:
        return f"```{str(code.get('language', '')).lower()}\n{code.get('code', '')}\n```"
    result = part.get("code_execution_result")
    if result is not None:
        return f"[code execution {str(result.get('outcome', '')).lower()}]\n{result.get('output', '')}"
    return None


def _decode_model(content: dict[str, Any], new_id: Callable[[], str]) -> tuple[Message, list[str | None]]:
    texts: list[str] = []
    calls: list[ToolCall] = []
    ids: list[str | None] = []
    for index, part in enumerate(content["parts"]):
        call = part.get("function_call")
        if call is not None:
            name = _name(call, index, "model", "function_call")
            given = call.get("id")
            if given is not None and (not isinstance(given, str) or not given):
                raise _bad(f"parts[{index}].function_call.id must be a string", role="model", field="id")
            call_id = given or new_id()
            calls.append(
                ToolCall(id=call_id, function=FunctionCall(name=name, arguments=_args_json(call, index)))
            )
            ids.append(call_id)
            continue
        ids.append(None)
        if "function_response" in part:
            raise _misplaced(index, "model", "function_response")
        if part.get("thought"):
            continue
        text = part.get("text")
        if text is None:
            text = _code_text(part) or _media_note(part)
        texts.append(text)
    text = "".join(texts)
    return Message(
        role="assistant", content=text or (None if calls else ""), tool_calls=tuple(calls) or None
    ), ids


def _standard_b64(data: str, where: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    except (binascii.Error, ValueError):
        raise _bad(f"{where} is not base64 data", role="user", field="inline_data") from None
    return base64.b64encode(raw).decode("ascii")


def _media_note(part: Mapping[str, Any]) -> str:
    media = part.get("inline_data") or part.get("file_data") or {}
    label = media.get("display_name") or media.get("file_uri") or "inline data"
    return f"[{media.get('mime_type', 'file')}: {label}]"


def _user_part(part: Mapping[str, Any], index: int) -> dict[str, Any]:
    if "text" in part:
        return {"type": "text", "text": part["text"]}
    blob = part.get("inline_data")
    if blob is not None:
        mime = str(blob.get("mime_type", "application/octet-stream"))
        data = blob.get("data")
        if not isinstance(data, str):
            raise _bad(f"parts[{index}].inline_data needs data", role="user", field="inline_data")
        encoded = _standard_b64(data, f"parts[{index}].inline_data.data")
        if mime in _AUDIO:
            return {"type": "input_audio", "input_audio": {"data": encoded, "format": _AUDIO[mime]}}
        uri = f"data:{mime};base64,{encoded}"
        if mime.startswith("image/"):
            return {"type": "image_url", "image_url": {"url": uri}}
        file: dict[str, Any] = {"file_data": uri}
        if isinstance(blob.get("display_name"), str):
            file["filename"] = blob["display_name"]
        return {"type": "file", "file": file}
    media = part.get("file_data")
    if media is not None and str(media.get("mime_type", "")).startswith("image/") and media.get("file_uri"):
        return {"type": "image_url", "image_url": {"url": str(media["file_uri"])}}
    return {"type": "text", "text": _code_text(part) or _media_note(part)}


def _decode_user(
    content: dict[str, Any], open_calls: Sequence[OpenCall]
) -> tuple[list[Message], list[str | None]]:
    waiting = list(open_calls)
    tools: list[Message] = []
    ids: list[str | None] = []
    rest: list[dict[str, Any]] = []
    for index, part in enumerate(content["parts"]):
        response = part.get("function_response")
        if response is None:
            ids.append(None)
            if "function_call" in part:
                raise _misplaced(index, "user", "function_call")
            if not part.get("thought"):
                rest.append(_user_part(part, index))
            continue
        name = _name(response, index, "user", "function_response")
        call_id = response.get("id")
        if call_id is not None and (not isinstance(call_id, str) or not call_id):
            raise _bad(f"parts[{index}].function_response.id must be a string", role="user", field="id")
        match = next((i for i, (cid, _) in enumerate(waiting) if cid == call_id), None)
        if call_id is None:
            match = next((i for i, (_, called) in enumerate(waiting) if called == name), None)
            if match is None:
                raise _bad(
                    f"parts[{index}]: the function_response of {name!r} has no id and answers no "
                    f"open call of that name",
                    role="user",
                    field="function_response",
                    open_calls=[cid for cid, _ in open_calls],
                )
            call_id = waiting[match][0]
        if match is not None:
            del waiting[match]
        payload = response.get("response", {})
        if not isinstance(payload, Mapping):
            raise _bad(
                f"parts[{index}].function_response.response must be an object",
                role="user",
                field="function_response",
            )
        tools.append(
            Message(role="tool", tool_call_id=call_id, content=json.dumps(payload, ensure_ascii=False))
        )
        ids.append(call_id)
    messages = tools
    if rest:
        only_text = len(rest) == 1 and rest[0]["type"] == "text"
        messages.append(
            Message.from_openai({"role": "user", "content": rest[0]["text"] if only_text else rest})
        )
    return messages, ids


def _usage(data: Mapping[str, Any]) -> ProviderUsage | None:
    usage = data.get("usage_metadata", data.get("usageMetadata"))
    if not isinstance(usage, Mapping):
        return None
    usage = {_snake(k): v for k, v in usage.items()}
    prompt = usage.get("prompt_token_count")
    if not isinstance(prompt, int):
        return None
    output = usage.get("candidates_token_count") or 0
    thoughts = usage.get("thoughts_token_count") or 0
    cached = usage.get("cached_content_token_count")
    return ProviderUsage(
        prompt_tokens=prompt,
        completion_tokens=int(output) + int(thoughts),
        cache_read_tokens=cached if isinstance(cached, int) else None,
    )


def _snake(key: Any) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in str(key))


class GeminiAdapter:
    """Decodes google-genai ``Content`` values and ``GenerateContentResponse`` replies."""

    name = FORMAT

    def __repr__(self) -> str:
        return "GeminiAdapter()"

    def accepts(self, obj: Any) -> bool:
        """True for a ``Content`` with role user or model (object or dict with
        ``"parts"``) and for a ``GenerateContentResponse`` (or its dump)."""
        data = _dump(obj)
        if not isinstance(data, Mapping):
            return False
        if _is_response(data):
            return True
        return "parts" in data and data.get("role") in ROLES

    def decode(
        self,
        obj: Any,
        *,
        open_calls: Sequence[OpenCall] = (),
        new_id: Callable[[], str] | None = None,
    ) -> Decoded:
        """The chat messages ``obj`` stands for, the first with the lossless original.

        ``open_calls``: the conversation's unanswered calls, oldest first, as
        ``(call_id, name)`` (``unanswered_calls``), which function responses without an
        id are matched against; ``new_id`` makes the ids of function calls without one.
        """
        data = _dump(obj)
        if not isinstance(data, Mapping):
            raise _bad(f"a Gemini Content must be an object, not {type(obj).__name__}")
        usage = None
        if _is_response(data):
            candidates = data.get("candidates")
            if not isinstance(candidates, list | tuple) or not candidates:
                raise _bad("the Gemini response has no candidates", field="candidates")
            first = candidates[0]
            content = first.get("content") if isinstance(first, Mapping) else None
            if not isinstance(content, Mapping) or not content.get("parts"):
                reason = (
                    first.get("finish_reason", first.get("finishReason"))
                    if isinstance(first, Mapping)
                    else None
                )
                raise _bad(
                    f"the Gemini response's first candidate has no content (finish_reason {reason})",
                    field="candidates",
                )
            data, usage = content, _usage(data)
        content_data = content_json(data)
        if content_data["role"] == "model":
            message, ids = _decode_model(content_data, new_id or _new_id)
            messages = [message]
        else:
            messages, ids = _decode_user(content_data, open_calls)
            if not messages:
                raise _bad(
                    "the user Content holds only thought parts: nothing to send", role="user", field="parts"
                )
        head = {"format": FORMAT, "version": VERSION, "content": content_data, "call_ids": ids}
        marker = {"format": FORMAT, "version": VERSION, "continues": True}
        originals = [head, *(dict(marker) for _ in messages[1:])]
        return Decoded(tuple(messages), tuple(originals), usage)
