"""A mapper for pydantic domain events (eventsourcing's default expects dataclasses).

Events are dumped with ``model_dump(mode="json")`` and rebuilt with
``model_validate``; ``class_version`` upcasting, compression and encryption work as
in eventsourcing's own ``Mapper``. Undecodable events raise ``LogDamagedError`` (a
``StoreError``) naming the topic, the conversation and the version; an event the
cipher cannot decrypt (damaged, or a wrong key) raises ``StoreError``.
"""

from __future__ import annotations

import json
from typing import Any, cast
from uuid import UUID

from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder
from eventsourcing.utils import get_topic, resolve_topic
from pydantic import BaseModel, ValidationError

from contextledger.domain.values.errors import ContextLedgerError, LogDamagedError, StoreError

__all__ = ["JSONBytesTranscoder", "PydanticMapper"]

#: Fields the stored event's columns hold, not its state.
_ENVELOPE = {"originator_id", "originator_version"}


class JSONBytesTranscoder(Transcoder):
    """Compact UTF-8 JSON. Pydantic has already made every value JSON-native."""

    def encode(self, obj: Any) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def decode(self, data: bytes) -> Any:
        return json.loads(data)


class PydanticMapper(Mapper[UUID]):
    """Converts pydantic domain events to and from ``StoredEvent`` objects."""

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        data = self.plain_state(domain_event)
        if self.encrypts():
            data = self.encrypt_state(domain_event.originator_id, domain_event.originator_version, data)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=get_topic(type(domain_event)),
            state=data,
        )

    def plain_state(self, domain_event: DomainEventProtocol[UUID]) -> bytes:
        """The event's state as stored before encryption (JSON, compressed if the
        store compresses)."""
        event = cast(BaseModel, domain_event)
        class_version = getattr(type(event), "class_version", 1)
        if type(self.transcoder) is JSONBytesTranscoder:
            # One pass in pydantic-core: the same JSON as dumping to Python values and
            # then to text (the domain models keep NaN and infinities as JSON's
            # extension constants, as ``json.dumps`` writes them), at a third of the cost.
            data = event.model_dump_json(exclude=_ENVELOPE).encode("utf-8")
            if class_version > 1:
                data = b'%s,"class_version":%d}' % (data[:-1], class_version)  # never "{}": timestamp
        else:
            state = event.model_dump(mode="json", exclude=_ENVELOPE)
            if class_version > 1:
                state["class_version"] = class_version
            data = self.transcoder.encode(state)
        if self.compressor:
            data = self.compressor.compress(data)
        return data

    def encrypts(self) -> bool:
        """Whether new records are encrypted (``encrypt_state``): with a cipher."""
        return bool(self.cipher)

    def decrypts(self) -> bool:
        """Whether stored records go through ``decrypt_state``: with a cipher."""
        return bool(self.cipher)

    def encrypt_state(self, originator_id: UUID, originator_version: int, data: bytes) -> bytes:
        """The stored form of an event's (compressed) state: encrypted with the cipher."""
        assert self.cipher is not None
        return self.cipher.encrypt(data)

    def decrypt_state(self, stored_event: StoredEvent) -> bytes:
        """The (compressed) state of a stored event; ``StoreError`` if it does not decrypt."""
        assert self.cipher is not None
        try:
            return self.cipher.decrypt(stored_event.state)
        except Exception as exc:  # a damaged event, or the wrong key
            where, context = describe(stored_event)
            raise StoreError(
                f"cannot decode stored event ({where}): it does not decrypt (damaged, or "
                f"the wrong key): {exc}",
                **context,
            ) from exc

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        data = stored_event.state
        if self.decrypts():
            data = self.decrypt_state(stored_event)
        return self.decode_state(stored_event, data)

    def stored_plain(self, stored_event: StoredEvent) -> bytes | None:
        """A stored record's state before encryption, as ``plain_state`` gives it for
        the event it holds (None: it cannot be decrypted here)."""
        if not self.decrypts():
            return bytes(stored_event.state)
        try:
            return bytes(self.decrypt_state(stored_event))
        except ContextLedgerError:
            return None

    def decode_state(self, stored_event: StoredEvent, data: bytes) -> DomainEventProtocol[UUID]:
        """The domain event of ``stored_event`` whose state, decrypted, is ``data``.

        A record written at its class's version, in this mapper's JSON, is validated
        from its JSON in one pass (pydantic-core, the envelope's two fields put in front
        of the state's own); anything that pass does not take -- a record to upcast, a
        string JSON cannot hold (a lone surrogate), a damaged record -- goes the general
        way (``json.loads``, upcasting, ``model_validate``), which gives the same event
        or the error that says what is wrong."""
        cls = _TOPICS.get(stored_event.topic)
        if cls is None:
            try:
                cls = resolve_topic(stored_event.topic)
            except Exception as exc:  # TopicError and import errors alike
                where, context = describe(stored_event)
                raise LogDamagedError(f"unknown event topic ({where})", **context) from exc
            if len(_TOPICS) < _TOPICS_LIMIT:
                _TOPICS[stored_event.topic] = cls
        if (
            not self.compressor
            and type(self.transcoder) is JSONBytesTranscoder
            and hasattr(cls, "model_validate_json")
        ):
            event = _from_json(cls, stored_event, bytes(data))
            if event is not None:
                return event
        return self._decode_general(cls, stored_event, data)

    def _decode_general(self, cls: Any, stored_event: StoredEvent, data: bytes) -> DomainEventProtocol[UUID]:
        try:
            if self.compressor:
                data = self.compressor.decompress(data)
            state: dict[str, Any] = self.transcoder.decode(data)
            if not isinstance(state, dict):
                raise TypeError(f"a JSON object was expected, not {type(state).__name__}")
            from_version = state.pop("class_version", 1)
            class_version = getattr(cls, "class_version", 1)
            while from_version < class_version:
                getattr(cls, f"upcast_v{from_version}_v{from_version + 1}")(state)
                from_version += 1
        except Exception as exc:  # zlib, JSON and upcasting errors all mean "undecodable"
            where, context = describe(stored_event)
            raise LogDamagedError(f"cannot decode stored event ({where}): {exc}", **context) from exc
        originator_id = stored_event.originator_id
        state["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))
        )
        state["originator_version"] = stored_event.originator_version
        try:
            return cast("DomainEventProtocol[UUID]", cls.model_validate(state))
        except (ValidationError, ContextLedgerError) as exc:  # a field's own check, e.g. a policy's
            where, context = describe(stored_event)
            raise LogDamagedError(f"stored event does not fit its class ({where}): {exc}", **context) from exc


#: Event classes by topic (``resolve_topic`` looks a topic up under a lock each call).
_TOPICS: dict[str, Any] = {}
_TOPICS_LIMIT = 4096


def _from_json(cls: Any, stored_event: StoredEvent, data: bytes) -> DomainEventProtocol[UUID] | None:
    """The event validated from its JSON in one pass (``decode_state``); None when that
    pass does not take it (the general way then decodes it, or says why it cannot).

    A record of a class past its first version is taken when it was written at the
    class's version: ``plain_state`` ends its JSON with the ``class_version`` key. A key
    so named inside the state (a nested one) sends it the general way; inside a JSON
    string the name's quotes are escaped."""
    version = getattr(cls, "class_version", 1)
    if version > 1:
        mark = b',"class_version":%d}' % version
        if not data.endswith(mark):
            return None  # written at another version (to upcast), or not this mapper's
        data = data[: -len(mark)] + b"}"  # another key so named is still there: refused below
    if data[:1] != b"{" or b'"class_version"' in data or b'"originator_' in data:
        return None  # to upcast, or a state that names the envelope's fields itself
    originator_id = stored_event.originator_id
    head = b'{"originator_id":"%s","originator_version":%d' % (
        str(originator_id).encode("ascii"),
        stored_event.originator_version,
    )
    body = data[1:].lstrip()
    document = head + (b"}" if body[:1] == b"}" else b"," + body)
    try:
        return cast("DomainEventProtocol[UUID]", cls.model_validate_json(document))
    except Exception:  # the general way decodes it, or names the fault
        return None


def describe(stored_event: StoredEvent) -> tuple[str, dict[str, Any]]:
    """How errors name a stored event: a phrase, and their context fields."""
    where = (
        f"topic {stored_event.topic!r}, conversation {stored_event.originator_id}, "
        f"version {stored_event.originator_version}"
    )
    context: dict[str, Any] = {
        "topic": stored_event.topic,
        "conversation_id": stored_event.originator_id,
        "version": stored_event.originator_version,
    }
    return where, context
