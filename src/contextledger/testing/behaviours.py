"""What the fake OpenAI server does with a request: the behaviours a script is made of,
and the record it keeps of every request.

A behaviour says *what* happens (an answer, an error, a delay, a broken connection);
the server renders it for the endpoint that was called, so one script serves
``POST /v1/chat/completions`` and ``POST /v1/responses`` alike.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal

__all__ = [
    "Behaviour",
    "Call",
    "Delay",
    "Drop",
    "Empty",
    "Endpoint",
    "Func",
    "Malformed",
    "RecordedRequest",
    "Reply",
    "Status",
]

#: The endpoints the server answers: chat completions, the Responses API and its
#: ``responses/compact``.
Endpoint = Literal["chat", "responses", "compact"]


@dataclass(frozen=True)
class Call:
    """One function call the model makes: a ``tool_calls`` entry in a chat completion,
    a ``function_call`` output item in a Responses answer.

    ``arguments`` is the JSON text the model sends, or a mapping encoded as JSON.
    Without ``call_id`` the server makes one that is unique within its log.
    """

    name: str
    arguments: str | Mapping[str, Any] = "{}"
    call_id: str | None = None

    @property
    def arguments_json(self) -> str:
        """The arguments as the JSON text the API carries."""
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(dict(self.arguments))


@dataclass(frozen=True)
class Reply:
    """A valid answer: text, function calls (several make a parallel call), or both.

    Token counts left out are estimated from the request (about four characters a
    token); ``model`` defaults to the requested model; ``finish_reason`` to ``"stop"``,
    or ``"tool_calls"`` when there are calls (``"length"`` makes a Responses answer
    ``incomplete``). ``reasoning`` puts a ``reasoning`` output item with that summary
    text first in a Responses answer (chat completions have no such item: it is left out).
    """

    text: str | None = None
    _: KW_ONLY
    #: A list or tuple of ``Call`` (kept as a tuple).
    tool_calls: Sequence[Call] = ()
    reasoning: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int = 0
    model: str | None = None
    finish_reason: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "tool_calls", tuple(self.tool_calls))


@dataclass(frozen=True)
class Empty:
    """A well-formed answer whose content is empty (``""``) or missing (``None``)."""

    content: str | None = ""


@dataclass(frozen=True)
class Status:
    """An HTTP error answer with an OpenAI-style error body (``Retry-After`` goes in
    ``headers``)."""

    code: int
    body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Malformed:
    """A 200 whose body is not valid JSON."""

    raw: bytes = b'{"id": "chatcmpl-x", "choices": [ {'


@dataclass(frozen=True)
class Drop:
    """Close the connection without answering."""


@dataclass(frozen=True)
class Delay:
    """Wait ``seconds`` on the server, then behave as ``then``."""

    seconds: float
    then: Behaviour = field(default_factory=lambda: Reply("Summary after a delay."))


@dataclass(frozen=True)
class RecordedRequest:
    """A request as the server received it: path, parsed JSON body, headers, and the
    ``time.monotonic()`` of its arrival."""

    method: str
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float

    @property
    def endpoint(self) -> Endpoint | None:
        """``"chat"``, ``"responses"``, ``"compact"`` (``responses/compact``), or None for
        a path the server does not serve."""
        path = self.path.split("?")[0].rstrip("/")
        if path.endswith("/chat/completions"):
            return "chat"
        if path.endswith("/responses/compact"):
            return "compact"
        if path.endswith("/responses"):
            return "responses"
        return None

    def header(self, name: str) -> str | None:
        """One header's value, whatever the case of its name."""
        wanted = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == wanted), None)


@dataclass(frozen=True)
class Func:
    """Decide per request: ``fn(request) -> Behaviour``, where ``request`` is the
    ``RecordedRequest`` (``request.path``, ``request.body``, ``request.endpoint``)."""

    fn: Callable[[RecordedRequest], Behaviour]


Behaviour = Reply | Delay | Status | Malformed | Drop | Empty | Func
