"""The one error tree of contextledger.

::

    ContextLedgerError
    ├── UsageError                      the caller asked for something invalid
    │   ├── InvalidArgumentError        an argument of the wrong type or out of range
    │   │   └── InvalidArgumentTypeError  where a framework's own class raises TypeError
    │   ├── InvalidMessageError         malformed message or broken tool-call order
    │   │   └── MessageTooLargeError    over max_message_bytes, max_message_tokens or max_tools_bytes
    │   ├── InvalidPolicyError          a ReductionPolicy that cannot work
    │   ├── ContextOverflowError        a message that cannot fit under max_context_tokens
    │   ├── ConversationNotFoundError   no conversation with that id (or at that version)
    │   ├── ConfigurationError          bad URL, bad setting, missing tiktoken encoding
    │   ├── DuplicateConversationError  start() with an id that already exists
    │   ├── IdempotencyConflictError    a client_message_id reused for a different message
    │   ├── UnknownReadModelError       rebuild() of a read model that does not exist
    │   ├── ReadOnlyError               a write on a ledger opened read_only=True
    │   ├── LedgerClosedError           a call to a ledger that is closed (or closing)
    │   ├── ConversationErasedError     the content's data subject was erased (crypto-shredded)
    │   └── InvalidEditError            an edit that cannot apply (breaks a tool-call group)
    │       ├── UnknownPositionError    no message was ever appended at that position
    │       ├── RetractedPositionError  the message at that position is already retracted
    │       └── SystemPromptEditError   the system prompt is changed by change_system_prompt()
    └── ContextLedgerRuntimeError       the environment failed, not the caller
        ├── ConcurrencyError            optimistic-concurrency retries exhausted
        ├── StoreError                  the event store failed (I/O, undecodable event)
        │   ├── SchemaMissingError      the store's schema or tables are not there
        │   ├── LogDamagedError         a conversation's stored log is damaged (missing,
        │   │                           out-of-order, unknown or undecodable events)
        │   ├── KeyMissingError         an event names a data key the key table lacks
        │   │                           (and no tombstone says it was erased)
        │   └── ReadModelAheadError     a read model applied more of the log than it holds
        ├── TrackingRewoundError        a read model was rebuilt under a running follower
        ├── SummaryRejectedError        a summary result that cannot be applied
        │   ├── StaleSummaryError       its range is no longer the pending one
        │   └── SummaryQualityError     empty, error text, too long, over the cap
        └── SummarizerError             a summarizer call failed (retryable unless said)
            ├── SummarizerTimeoutError
            ├── SummarizerRateLimitedError  (retry_after seconds, if the provider said)
            ├── SummarizerUnavailableError  (5xx, refused or dropped connection)
            ├── SummarizerOutputError       (empty, malformed or over-long output)
            ├── SummarizerAuthenticationError  (401/403: key or permission; not retried)
            └── SummarizerRequestError      (400/404/422: the request itself; not retried)

Every error carries typed context attributes, declared on its class (``conversation_id``
on all of them; ``position``, ``version``, ``limit`` ... where they apply). They are
given as keyword arguments, kept on the instance, listed in ``context`` and shown in
``str()``. Foreign exceptions (pydantic, SQLAlchemy, psycopg, sqlite3, openai) never
leave the public API: they are mapped to one of these with the cause chained.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

__all__ = [
    "ConcurrencyError",
    "ConfigurationError",
    "ContextLedgerError",
    "ContextLedgerRuntimeError",
    "ContextOverflowError",
    "ConversationErasedError",
    "ConversationNotFoundError",
    "DuplicateConversationError",
    "IdempotencyConflictError",
    "InvalidArgumentError",
    "InvalidArgumentTypeError",
    "InvalidEditError",
    "InvalidMessageError",
    "InvalidPolicyError",
    "KeyMissingError",
    "LedgerClosedError",
    "LogDamagedError",
    "MessageTooLargeError",
    "ReadModelAheadError",
    "ReadOnlyError",
    "RetractedPositionError",
    "SchemaMissingError",
    "StaleSummaryError",
    "StoreError",
    "SummarizerAuthenticationError",
    "SummarizerError",
    "SummarizerOutputError",
    "SummarizerRateLimitedError",
    "SummarizerRequestError",
    "SummarizerTimeoutError",
    "SummarizerUnavailableError",
    "SummaryQualityError",
    "SummaryRejectedError",
    "SystemPromptEditError",
    "TrackingRewoundError",
    "UnknownPositionError",
    "UnknownReadModelError",
    "UsageError",
]


class ContextLedgerError(Exception):
    """Root of every error raised by contextledger.

    Context attributes are declared with their types on each class; an attribute not
    given is ``None``. Passing an undeclared one is a programming error (``TypeError``).
    """

    #: The conversation the error concerns (its id, or the key it was addressed by).
    conversation_id: UUID | str | None = None
    #: The key the caller addressed the conversation by, when it used one.
    key: str | None = None

    _fields: ClassVar[tuple[str, ...]] = ("conversation_id", "key")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        names: list[str] = []
        for klass in reversed(cls.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if not name.startswith("_") and name not in ("message", "context") and name not in names:
                    annotation = klass.__annotations__[name]
                    if "ClassVar" not in str(annotation):
                        names.append(name)
        cls._fields = tuple(names)

    def __init__(self, message: str, **context: Any) -> None:
        unknown = sorted(set(context) - set(self._fields))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} takes no context attribute {unknown}; declared: {list(self._fields)}"
            )
        super().__init__(message)
        self.message = message
        for key, value in context.items():
            setattr(self, key, value)

    @property
    def context(self) -> dict[str, Any]:
        """The context attributes that differ from their defaults, in declaration order."""
        cls = type(self)
        return {
            name: value
            for name in self._fields
            if (value := getattr(self, name, None)) is not None and value != getattr(cls, name, None)
        }

    def __str__(self) -> str:
        context = self.context
        if not context:
            return self.message
        details = ", ".join(f"{k}={v!r}" for k, v in context.items())
        return f"{self.message} ({details})"

    def __reduce__(self) -> tuple[Any, ...]:
        # Keeps errors picklable (they cross process pools and worker boundaries).
        return (_rebuild, (type(self), self.message, self.context))


def _rebuild(cls: type[ContextLedgerError], message: str, context: dict[str, Any]) -> ContextLedgerError:
    return cls(message, **context)


class UsageError(ContextLedgerError):
    """The caller asked for something invalid; retrying the same call cannot help."""

    #: The name of the argument (or setting) at fault.
    argument: str | None = None


class InvalidArgumentError(UsageError):
    """An argument has the wrong type or lies outside its range."""

    #: What the argument was given (shortened in messages, never a secret).
    value: str | None = None


class InvalidArgumentTypeError(InvalidArgumentError, TypeError):
    """An argument a framework's own class refuses with ``TypeError`` (an unknown
    settings field, a value of the wrong type): raised where contextledger stands in
    for that class, so code written for it catches it as a ``TypeError`` too."""


class InvalidMessageError(UsageError):
    """A message is malformed, or breaks OpenAI's tool-call ordering rules."""

    role: str | None = None
    position: int | None = None
    #: The message key at fault (``content``, ``tool_calls`` ...).
    field: str | None = None
    tool_call_id: str | None = None
    open_calls: list[str] | None = None


class MessageTooLargeError(InvalidMessageError):
    """A message (or system prompt) larger than ``Settings.max_message_bytes`` (UTF-8
    bytes of its JSON) or ``Settings.max_message_tokens``, or tool definitions larger
    than ``Settings.max_tools_bytes`` (``field="tools"``); nothing is written."""

    #: The limit exceeded, and the message's size, in ``unit`` ("bytes" or "tokens").
    limit: int | None = None
    size: int | None = None
    unit: str | None = None
    #: The setting that holds the limit.
    setting: str | None = None


class InvalidPolicyError(UsageError):
    """A ReductionPolicy whose settings contradict each other or cannot be met."""

    field: str | None = None
    limit: int | None = None


class ContextOverflowError(UsageError):
    """A message (with the system prompt) cannot fit under ``max_context_tokens``."""

    tokens: int | None = None
    limit: int | None = None


class ConversationNotFoundError(UsageError):
    """No conversation exists with that id (or not at that version)."""

    version: int | None = None


class DuplicateConversationError(UsageError):
    """``start()`` was given an id (or key) that is already taken (``key`` names it)."""


class IdempotencyConflictError(UsageError):
    """A ``client_message_id`` already names a different message in this conversation
    (a retry must send the same message); nothing is written."""

    client_message_id: str | None = None
    #: The position of the message the id already names.
    position: int | None = None


class ConfigurationError(UsageError):
    """A URL, a setting or an installed resource (e.g. a tiktoken encoding) is wrong."""

    #: The database URL, password masked.
    url: str | None = None
    setting: str | None = None
    encoding: str | None = None
    model: str | None = None


class UnknownReadModelError(UsageError):
    """``rebuild()`` was given a name no projection has."""

    projection: str | None = None
    known: tuple[str, ...] | None = None


class ReadOnlyError(UsageError):
    """A write (``append``, ``start``, an edit, the summarization policy ...) on a
    ledger opened with ``read_only=True``; nothing is written."""

    #: The refused call (``append``, ``start_policy`` ...).
    operation: str | None = None


class LedgerClosedError(UsageError):
    """A call to a ledger after ``close()`` began (a call in flight then finishes,
    within the close timeout); it wrote nothing. Open the ledger again to go on."""


class ConversationErasedError(UsageError):
    """The content asked for, or a write to it, belongs to a data subject whose data
    key was destroyed (crypto-shredding): it can never be read or written again."""

    #: The data subject (a person, a tenant; a conversation of its own: its id).
    subject: str | None = None
    #: When the subject was erased, and the reason given.
    erased_at: datetime | None = None
    reason: str | None = None


class InvalidEditError(UsageError):
    """An edit (retract, edit, rewind, pop, clear) that cannot apply: e.g. an edited
    message of another role, changed tool-call ids, or a rewind that splits a group."""

    position: int | None = None
    #: The message key at fault (``role``, ``tool_calls``, ``tool_call_id`` ...).
    field: str | None = None


class UnknownPositionError(InvalidEditError):
    """No message was ever appended at that position."""

    #: The position the next appended message gets.
    next_position: int | None = None


class RetractedPositionError(InvalidEditError):
    """The message at that position was retracted already (positions are never reused)."""


class SystemPromptEditError(InvalidEditError):
    """The system prompt (position -1) cannot be retracted or edited as a message:
    ``change_system_prompt()`` replaces it."""


class ContextLedgerRuntimeError(ContextLedgerError):
    """The environment failed; the same call may succeed later."""


class ConcurrencyError(ContextLedgerRuntimeError):
    """Concurrent writers kept conflicting; the bounded retries ran out."""

    attempts: int | None = None
    seconds: float | None = None


class StoreError(ContextLedgerRuntimeError):
    """The event store failed, or a stored event could not be decoded."""

    topic: str | None = None
    version: int | None = None
    #: The database URL, password masked.
    url: str | None = None
    #: Why a database server could not be used: ``server_unreachable``,
    #: ``database_missing`` or ``authentication_failed`` (None: another failure).
    cause: str | None = None


class SchemaMissingError(StoreError):
    """A store opened read-only lacks its schema, a table, or (SQLite) its file: it
    is not a contextledger store, or not yet one (``contextledger init`` makes one).
    Nothing is created."""

    #: The missing table (or schema, or file), as the database names it.
    table: str | None = None
    schema: str | None = None


class LogDamagedError(StoreError):
    """A conversation's stored log cannot be read as its history: an event is missing
    (a gap in versions, no ``Started``), out of order, of an unknown topic or
    undecodable, or the events do not fold. ``version`` names where; ``verify`` lists
    every such place in the store."""


class KeyMissingError(StoreError):
    """A stored record names a data key that the store's key table does not hold, and
    no tombstone says it was erased: the key table was damaged, restored apart from
    the events, or belongs to another store. Never read as an erasure."""

    #: The key's id as the record names it (hex), and its subject when known.
    key_id: str | None = None
    subject: str | None = None


class ReadModelAheadError(StoreError):
    """A read model's tracking position lies past the head of the log it follows: the
    event store was restored from an older backup, or the read models belong to
    another store. Its rows count events the log no longer holds, so it is not run;
    ``contextledger rebuild NAME`` (``ReadModelRunner.rebuild``) makes it again from
    the log."""

    #: The read model.
    projection: str | None = None
    #: Its tracking position (a notification id).
    position: int | None = None
    #: The highest notification id committed in the log.
    head: int | None = None


class TrackingRewoundError(ContextLedgerRuntimeError):
    """A view's tracking row went back below what this process had seen (someone
    rebuilt the read model); the follower resumes from there."""

    projection: str | None = None
    tracked: int | None = None


class SummaryRejectedError(ContextLedgerRuntimeError):
    """A summary result was not applied; the log is unchanged apart from the rejection."""

    from_position: int | None = None
    through_position: int | None = None


class StaleSummaryError(SummaryRejectedError):
    """The summary's range is not the conversation's pending range (late or duplicate)."""

    pending: tuple[int, int] | None = None


class SummaryQualityError(SummaryRejectedError):
    """The summary failed the quality gate (empty, error text, too long, over the cap)."""

    tokens: int | None = None
    limit: int | None = None


class SummarizerError(ContextLedgerRuntimeError):
    """A summarizer call failed. ``retryable`` says whether trying again may help."""

    retryable: bool = True
    model: str | None = None
    #: The provider's HTTP status, when it answered with one.
    status: int | None = None


class SummarizerTimeoutError(SummarizerError):
    """The summarizer did not answer in time."""


class SummarizerRateLimitedError(SummarizerError):
    """The provider answered 429; ``retry_after`` holds its hint in seconds, if any."""

    retry_after: float | None = None


class SummarizerUnavailableError(SummarizerError):
    """The provider answered 5xx, refused the connection or dropped it."""


class SummarizerOutputError(SummarizerError):
    """The provider answered, but the output is empty, malformed or too long."""


class SummarizerAuthenticationError(SummarizerError):
    """The provider refused the key or its permissions (401/403). Not retried: the
    configuration must change; the offline fallback (if configured) takes over."""

    retryable: bool = False


class SummarizerRequestError(SummarizerError):
    """The provider rejected the request itself (400, 404 unknown model, 422). Not
    retried; the offline fallback (if configured) takes over."""

    retryable: bool = False
