"""The working memory as a Gemini request: ``render_gemini(entries)`` gives
``{"system_instruction": ..., "contents": [...]}`` as JSON dicts google-genai takes::

    request = render_gemini(context_entries(ledger, cid).entries)
    client.models.generate_content(
        model=model,
        contents=request["contents"],
        config={"system_instruction": request["system_instruction"]},
    )

How each ``ContextEntry`` is rendered:

- A ``Content`` decoded by ``formats.gemini`` whose chat messages are all in the
  working memory, unreduced and unedited, comes back exactly as it was appended
  (thought parts, ``thought_signature`` and id-less calls included). Tool results the
  policy reduced become placeholder ``function_response`` parts (same name and id,
  ``response={"output": <placeholder>}``); parts whose chat message was edited or is
  gone (summarized) are rendered from the chat form, or left out.
- Messages appended in chat form become parts: assistant text and tool calls a model
  turn (``function_call`` with the call's id and parsed arguments); tool results
  ``function_response`` parts (a JSON object result as the response, other text as
  ``{"output": text}``; an Anthropic ``tool_result`` with ``is_error`` as
  ``{"error": text}``, its images and PDF documents as the response's ``parts``); user
  text, data-URI images, audio and files a user turn; consecutive chat messages of one
  role share a turn. System and developer messages before the first other message
  join the system instruction; a later one stays in its place, a ``[system] ...`` or
  ``[developer] ...`` text part of a user turn.
- The system prompt is the ``system_instruction``. Summaries go there too
  (``summary="system"``) or stand as user turns (``summary="user"``) or model turns
  (``summary="assistant"``: after the short note that opens the conversation, as a
  Gemini conversation starts with a user turn) where the policy put them.

The result obeys Gemini's rules (``contextledger.testing.gemini_rules``): roles user
and model only, every ``function_call`` answered by ``function_response`` parts in
the next user turn (matched by id, or by name where the call has none), no orphan
response, the first turn a user turn (a short note opens the conversation when the
working memory starts with a model turn). Calls still waiting for their results at
the end stay unanswered, as in ``Ledger.context``.
"""

from __future__ import annotations

import copy
import json
import mimetypes
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from contextledger.application.formats.anthropic import describe, is_head
from contextledger.application.formats.base import labelled_instruction
from contextledger.application.formats.gemini import is_gemini_original
from contextledger.application.formats.originals import ContextEntry
from contextledger.domain.values.errors import InvalidArgumentError
from contextledger.domain.values.messages import Message

__all__ = ["CONTINUED", "SUMMARIZED", "render_gemini"]

#: The user turn that opens a conversation whose working memory starts with a model turn.
CONTINUED = "(The conversation continues.)"
#: The same, when the summary of what came before is in the system instruction.
SUMMARIZED = "(The earlier conversation is summarized in the system instruction.)"
_SUMMARY_PREFIX = "Summary of the earlier conversation"
_AUDIO_MIME = {"wav": "audio/wav", "mp3": "audio/mp3"}


@dataclass
class _Turn:
    role: str
    parts: list[dict[str, Any]]
    #: Rendered from an original: kept as a turn of its own.
    original: bool = False
    #: chat call id -> (function name, the id the wire form carries, or None).
    calls: dict[str, tuple[str, str | None]] = field(default_factory=dict)


def _is_summary(entry: ContextEntry) -> bool:
    message = entry.message
    return message.get("role") == "user" or str(message.get("content", "")).startswith(_SUMMARY_PREFIX)


def _response_of(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except ValueError:
        parsed = None
    return parsed if isinstance(parsed, dict) else {"output": text}


def _data_uri(url: str) -> tuple[str, str] | None:
    if not url.startswith("data:") or ";base64," not in url:
        return None
    mime, data = url[5:].split(";base64,", 1)
    return mime or "application/octet-stream", data


def _user_parts(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}] if content else []
    parts: list[dict[str, Any]] = []
    for part in content or ():
        kind = part.get("type")
        if kind == "text":
            parts.append({"text": part["text"]})
        elif kind == "image_url":
            url = str(part["image_url"].get("url", ""))
            inline = _data_uri(url)
            if inline is not None:
                parts.append({"inline_data": {"mime_type": inline[0], "data": inline[1]}})
            else:
                mime = mimetypes.guess_type(url)[0] or "image/jpeg"
                parts.append({"file_data": {"mime_type": mime, "file_uri": url}})
        elif kind == "input_audio":
            audio = part["input_audio"]
            mime = _AUDIO_MIME.get(str(audio.get("format")), "audio/wav")
            parts.append({"inline_data": {"mime_type": mime, "data": audio.get("data", "")}})
        elif kind == "file":
            inline = _data_uri(str(part["file"].get("file_data", "")))
            if inline is not None:
                parts.append({"inline_data": {"mime_type": inline[0], "data": inline[1]}})
            else:
                parts.append(
                    {"text": f"[file: {part['file'].get('filename') or part['file'].get('file_id')}]"}
                )
        else:
            parts.append({"text": str(part.get("text", part.get("refusal", "")))})
    return parts


def _anthropic_results(entries: Sequence[ContextEntry]) -> dict[str, dict[str, Any]]:
    """The ``tool_result`` blocks of the Anthropic user turns appended whole, by call id."""
    found: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if not is_head(entry.original) or entry.original is None:
            continue
        message = entry.original["message"]
        content = message.get("content") if message.get("role") == "user" else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict) and block.get("type") == "tool_result":
                found[str(block.get("tool_use_id"))] = block
    return found


def _media_part(block: Mapping[str, Any]) -> dict[str, Any] | None:
    """An Anthropic image (or PDF document) block as a Gemini blob or file reference."""
    raw = block.get("source")
    source: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    kind = block.get("type")
    if kind not in ("image", "document"):
        return None
    if source.get("type") == "base64" and isinstance(source.get("data"), str):
        mime = str(source.get("media_type") or ("image/png" if kind == "image" else "application/pdf"))
        return {"inline_data": {"mime_type": mime, "data": source["data"]}}
    if kind == "image" and source.get("type") == "url" and isinstance(source.get("url"), str):
        mime = mimetypes.guess_type(source["url"])[0] or "image/jpeg"
        return {"file_data": {"mime_type": mime, "file_uri": source["url"]}}
    return None


def _anthropic_response(
    block: Mapping[str, Any], text: str
) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """An Anthropic ``tool_result`` as a Gemini function response and its media parts:
    ``{"error": text}`` when it has ``is_error``, images and PDFs as the response's
    ``parts``. None when the chat message no longer reads as the block (edited, or a
    placeholder stands for it)."""
    content = block.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    whole = content if isinstance(content, str) else "\n".join(describe(b) for b in blocks)
    if whole != text:
        return None
    media = [part for part in (_media_part(b) for b in blocks) if part is not None]
    if media:
        text = "\n".join(describe(b) for b in blocks if _media_part(b) is None)
    response = {"error": text} if block.get("is_error") is True else _response_of(text)
    return response, media


class _Renderer:
    def __init__(self, entries: Sequence[ContextEntry] = ()) -> None:
        #: chat call id -> (name, wire id) for every call seen so far.
        self.calls: dict[str, tuple[str, str | None]] = {}
        #: Anthropic tool results appended whole, by call id.
        self.anthropic = _anthropic_results(entries)

    # -- chat form -> parts ------------------------------------------------------

    def tool_part(
        self, message: Message, *, wire_id: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        call_id = message.tool_call_id or ""
        known_name, known_id = self.calls.get(call_id, ("tool", call_id))
        response: dict[str, Any] = {"name": name or known_name, "response": _response_of(message.text)}
        block = self.anthropic.get(call_id) if name is None else None
        crossed = _anthropic_response(block, message.text) if block is not None else None
        if crossed is not None:
            response["response"] = crossed[0]
            if crossed[1]:
                response["parts"] = crossed[1]
        wire = wire_id if name is not None else known_id
        if wire is not None:
            response = {"id": wire, **response}
        return {"function_response": response}

    def converted(self, message: Message) -> _Turn | None:
        if message.role == "assistant":
            parts: list[dict[str, Any]] = [{"text": message.text}] if message.text else []
            calls: dict[str, tuple[str, str | None]] = {}
            for call in message.tool_calls or ():
                try:
                    args = json.loads(call.function.arguments)
                except ValueError:
                    args = None
                if not isinstance(args, dict):
                    args = {"arguments": call.function.arguments}
                parts.append({"function_call": {"id": call.id, "name": call.function.name, "args": args}})
                calls[call.id] = (call.function.name, call.id)
            self.calls.update(calls)
            return _Turn("model", parts, calls=calls) if parts else None
        if message.role == "tool":
            return _Turn("user", [self.tool_part(message)])
        parts = _user_parts(message.content)
        return _Turn("user", parts) if parts else None

    # -- originals -> parts ------------------------------------------------------

    def group(self, members: list[ContextEntry]) -> list[_Turn]:
        """A decoded Content (its head first) and the present members of its group."""
        head = members[0].original or {}
        content = head["content"]
        call_ids: list[str | None] = list(head.get("call_ids") or [])
        call_ids += [None] * (len(content["parts"]) - len(call_ids))
        if content["role"] == "model":
            calls = {}
            for part, call_id in zip(content["parts"], call_ids, strict=True):
                if call_id is not None and "function_call" in part:
                    calls[call_id] = (part["function_call"]["name"], part["function_call"].get("id"))
            self.calls.update(calls)
            return [_Turn("model", copy.deepcopy(content["parts"]), original=True, calls=calls)]
        untouched = all(is_gemini_original(m.original) and not m.reduced for m in members)
        if untouched and len(members) == _group_size(head):
            return [_Turn("user", copy.deepcopy(content["parts"]), original=True)]
        tools = {
            Message.from_openai(m.message).tool_call_id: m for m in members if m.message["role"] == "tool"
        }
        user = next((m for m in members if m.message["role"] != "tool"), None)
        parts: list[dict[str, Any]] = []
        rest_done = False
        for part, call_id in zip(content["parts"], call_ids, strict=True):
            if call_id is not None:
                member = tools.get(call_id)
                if member is None:
                    continue
                response = part["function_response"]
                if member.reduced or not is_gemini_original(member.original):
                    message = Message.from_openai(member.message)
                    parts.append(self.tool_part(message, wire_id=response.get("id"), name=response["name"]))
                else:
                    parts.append(copy.deepcopy(part))
            elif user is not None and not rest_done:
                if is_gemini_original(user.original):
                    parts.append(copy.deepcopy(part))
                else:
                    parts.extend(_user_parts(Message.from_openai(user.message).content))
                    rest_done = True
        return [_Turn("user", parts, original=True)] if parts else []

    # -- the whole request -------------------------------------------------------

    def pieces(self, entries: Sequence[ContextEntry], summary: str) -> tuple[list[str], list[_Turn]]:
        system: list[str] = []
        turns: list[_Turn] = []
        seen = False  # a message of the conversation itself was rendered
        index = 0
        while index < len(entries):
            entry = entries[index]
            index += 1
            message = Message.from_openai(entry.message)
            if entry.position is None:
                if summary in ("user", "assistant") and _is_summary(entry):
                    turns.append(_Turn("user" if summary == "user" else "model", [{"text": message.text}]))
                else:
                    system.append(message.text)
                continue
            original = entry.original
            if is_gemini_original(original) and original is not None and "content" in original:
                seen = True
                members = [entry]
                start = entry.position
                size = _group_size(original)
                while index < len(entries):
                    nxt = entries[index]
                    if nxt.position is None or not start < nxt.position < start + size:
                        break
                    members.append(nxt)
                    index += 1
                turns.extend(self.group(members))
                continue
            if message.role in ("system", "developer"):
                if not seen:  # before the conversation: an instruction like the system prompt
                    system.append(message.text)
                elif text := labelled_instruction(message.role, message.text):
                    turns.append(_Turn("user", [{"text": text}]))
                continue
            seen = True
            turn = self.converted(message)
            if turn is not None:
                turns.append(turn)
        return system, turns


def _group_size(original: Mapping[str, Any]) -> int:
    """How many chat messages the Content of a head original decoded to."""
    content = original["content"]
    if content["role"] == "model":
        return 1
    call_ids = list(original.get("call_ids") or [])
    responses = sum(1 for part in content["parts"] if "function_response" in part)
    rest = any("function_response" not in part and not part.get("thought") for part in content["parts"])
    return max(responses, len([i for i in call_ids if i is not None])) + (1 if rest else 0)


def _has_responses(turn: _Turn) -> bool:
    return any("function_response" in part for part in turn.parts)


def _assemble(turns: list[_Turn]) -> list[_Turn]:
    """Turns merged where Gemini needs it: the responses to one model turn's calls in
    one user turn, and consecutive chat-form turns of one role in one turn."""
    out: list[_Turn] = []
    pending = 0
    for turn in turns:
        last = out[-1] if out else None
        answering = (
            last is not None
            and last.role == "user"
            and turn.role == "user"
            and pending > 0
            and _has_responses(last)
            and _has_responses(turn)
        )
        if (
            last is not None
            and last.role == turn.role
            and (answering or not (last.original or turn.original))
        ):
            last.parts.extend(turn.parts)
            last.calls.update(turn.calls)
            last.original = last.original or turn.original
        else:
            out.append(_Turn(turn.role, list(turn.parts), turn.original, dict(turn.calls)))
        current = out[-1]
        if current.role == "model":
            pending = sum(1 for part in current.parts if "function_call" in part)
        else:
            pending = max(0, pending - sum(1 for part in turn.parts if "function_response" in part))
    return out


def render_gemini(
    entries: Sequence[ContextEntry], *, summary: Literal["system", "user", "assistant"] = "system"
) -> dict[str, Any]:
    """The working memory (``context_entries(...).entries``) as a Gemini request:
    ``{"system_instruction": {"parts": [...]} or None, "contents": [...]}``."""
    if summary not in ("system", "user", "assistant"):
        raise InvalidArgumentError(
            f"summary must be 'system', 'user' or 'assistant', not {summary!r}", argument="summary"
        )
    renderer = _Renderer(list(entries))
    system, pieces = renderer.pieces(list(entries), summary)
    turns = _assemble(pieces)
    if turns and turns[0].role != "user":
        summarized = any(e.position is None and _is_summary(e) for e in entries)
        note = SUMMARIZED if summarized and summary == "system" else CONTINUED
        turns.insert(0, _Turn("user", [{"text": note}]))
    text = "\n\n".join(t for t in system if t)
    return {
        "system_instruction": {"parts": [{"text": text}]} if text else None,
        "contents": [{"role": turn.role, "parts": turn.parts} for turn in turns],
    }
