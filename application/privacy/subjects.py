"""Data subjects of conversations: named when a conversation starts or forks.

A conversation started with ``subject="user-42"`` is assigned to that subject's data
key before its first event is saved, so every event and snapshot of it is encrypted
under the subject's key from the start; without ``subject`` it is its own subject
(its id, as text). A fork belongs to its source's subject unless given another;
what it inherits (its first record, and summaries and snapshots repeating inherited
content) is under the keys of every subject whose content it holds, so that erasing
any of them erases that part of the fork too (``infrastructure/keys/lineage.py``).
Erasing a subject destroys its one key (``docs/privacy.md``).

The keys live in the store's key table (``contextledger.infrastructure.keys.subject_keys``);
the application reaches them through the small ``SubjectKeysPort``, named by topic
as every adapter is (the application never imports infrastructure). With several
stores, each store keeps its own keys: a conversation is assigned in the store it is
placed in.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import IntegrityError

from contextledger.application.shared.settings import Settings, resolve_adapter
from contextledger.application.storage.sharding import ShardedStore
from contextledger.application.storage.store import ConversationStore
from contextledger.domain.values.errors import ConfigurationError, InvalidArgumentError
from contextledger.domain.values.validation import MAX_SUBJECT_CHARS, check_subject

__all__ = [
    "ERASED_SUBJECTS_TOPIC",
    "LEARN_ERASURES_TOPIC",
    "MAX_SUBJECT_CHARS",
    "SUBJECT_KEYS_TOPIC",
    "SubjectKeysPort",
    "Subjects",
    "check_subject",
    "erased_subjects_check",
]

#: The function giving an application's data keys (None without a cipher key).
SUBJECT_KEYS_TOPIC = "contextledger.infrastructure.keys.subject_mapper:subject_keys_of"
#: The function giving the check of a cached conversation before it is read (None
#: without per-subject keys).
ERASED_SUBJECTS_TOPIC = "contextledger.infrastructure.keys.subject_mapper:erased_subjects_of"
#: The function giving the check of a conversation against the key table itself, made
#: before its content is sent to a summarizer (None without per-subject keys).
LEARN_ERASURES_TOPIC = "contextledger.infrastructure.keys.subject_mapper:learn_erasures_of"


class SubjectKeysPort(Protocol):
    """What the application needs of a store's data keys (``SubjectKeys`` is one)."""

    def assign(self, conversation_id: UUID, subject: str) -> None:
        """Name the conversation's subject before its first record is written."""
        ...

    def subject_of(self, conversation_id: UUID) -> str:
        """The subject the conversation names, or its own id as text."""
        ...

    def is_erased(self, subject: str) -> bool: ...


def erased_subjects_check(app: Any) -> Callable[[UUID], tuple[str, ...]] | None:
    """The erased subjects among those whose content a conversation of the
    application's store holds, as its process knows them (None: no per-subject keys):
    what ``ConversationStore`` checks a cached conversation with before serving it."""
    found: Callable[[Any], Callable[[UUID], tuple[str, ...]] | None] = resolve_adapter(ERASED_SUBJECTS_TOPIC)
    return found(app)


def keys_of(app: Any) -> SubjectKeysPort | None:
    """The data keys of an application's store (None: no cipher key)."""
    found: Callable[[Any], SubjectKeysPort | None] = resolve_adapter(SUBJECT_KEYS_TOPIC)
    return found(app)


class SubjectHost(Protocol):
    """What naming subjects needs of the ledger."""

    @property
    def settings(self) -> Settings: ...

    @property
    def store(self) -> ConversationStore: ...


class Subjects:
    """The subjects of a ledger's conversations (``Ledger`` delegates to it)."""

    def __init__(self, host: SubjectHost) -> None:
        self._host = host

    def _check_configured(self) -> None:
        settings = self._host.settings
        if settings.key_scope != "subject":
            raise ConfigurationError(
                'subject= needs key_scope="subject" (CONTEXTLEDGER_KEY_SCOPE): with '
                '"store" every record is encrypted under the master key, and erasing a '
                "subject could not shred its conversations alone",
                setting="key_scope",
            )

    def _active(self) -> bool:
        return self._host.settings.key_scope == "subject"

    def _keys(self, store: ConversationStore) -> SubjectKeysPort:
        keys = keys_of(store.app)
        if keys is None:  # key_scope is "subject", so only a read-only store lacks them
            raise ConfigurationError(
                "the store keeps no data keys (it was opened read-only before it had any, "
                "or its mapper is not the subject mapper)",
                setting="key_scope",
            )
        return keys

    def checked(self, subject: str | None) -> str | None:
        """``subject`` checked (None stays None); a subject needs per-subject keys."""
        if subject is None:
            return None
        check_subject(subject)
        self._check_configured()
        return subject

    def keys_for(self, conversation_id: UUID) -> SubjectKeysPort | None:
        """The data keys of the store that holds the conversation (None: no keys)."""
        if not self._active():
            return None
        store = self._host.store
        found = store.store_for(conversation_id) if isinstance(store, ShardedStore) else store
        return keys_of(found.app)

    def assign_new(self, conversation_id: UUID, subject: str) -> None:
        """Name ``subject`` for a conversation about to be created (checked already),
        in the store it is placed in."""
        store = self._host.store
        target = store.place_new(conversation_id) if isinstance(store, ShardedStore) else store
        recorder: Any = getattr(target.app, "recorder")  # noqa: B009 - the eventsourcing application's
        if recorder.select_events(conversation_id, limit=1):
            # The id is taken (a key in use): the caller's duplicate, not a subject's error.
            raise IntegrityError(f"conversation {conversation_id} exists already")
        self._keys(target).assign(conversation_id, subject)

    def learn_erasures(self, conversation_id: UUID) -> tuple[str, ...]:
        """The subjects whose content the conversation holds that the store's key table
        now says are erased and this process did not know of: its cached keys count a
        subject erased by another process as live for up to ``cache_seconds``. They are
        learnt: the next read of the conversation raises ``ConversationErasedError``,
        or gives a fork's remainder. One query per subject; nothing without per-subject
        keys."""
        if not self._active():
            return ()
        store = self._host.store
        found = store.store_for(conversation_id) if isinstance(store, ShardedStore) else store
        learn: Callable[[Any], Callable[[UUID], tuple[str, ...]] | None]
        learn = resolve_adapter(LEARN_ERASURES_TOPIC)
        check = learn(found.app)
        return () if check is None else check(conversation_id)

    def subject_of(self, conversation_id: UUID) -> str | None:
        """The conversation's subject (its id as text when it names none); None when
        the store keeps no per-subject keys."""
        keys = self.keys_for(conversation_id)
        return None if keys is None else keys.subject_of(conversation_id)

    def check_same(self, conversation_id: UUID, subject: str) -> None:
        """``InvalidArgumentError`` unless the existing conversation belongs to ``subject``."""
        named = self.subject_of(conversation_id)
        if named is not None and named != subject:
            raise InvalidArgumentError(
                f"the conversation belongs to another data subject ({named!r}), not {subject!r}",
                conversation_id=conversation_id,
                argument="subject",
            )
