"""Closing a ledger while calls are in flight: a gate that admits calls until closed.

Every public method of the ledger passes a ``Lifecycle`` gate (``guard_methods``),
which counts the call in and out, or refuses it with ``LedgerClosedError`` once
``close()`` has begun. ``close_all`` then shuts down a group of ledgers (one, or a
sharded ledger's stores) in three steps, so that no connection is ever closed under a
call that uses it:

1. every gate refuses new calls (nothing more is written);
2. the followers (the summarization policy, read models) stop: their next call to
   the ledger is refused, the one in flight finishes;
3. the calls in flight are given until the deadline to finish, and the stores are
   released (pools and connections closed). A call still running at the deadline
   keeps its store: the last such call to end releases it, and ``close()`` returns.

A second ``close()`` does nothing. An open gate takes no lock: a call counts itself in
and out (two ``next`` on ``itertools.count``) and reads a flag.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import threading
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any, NoReturn, Protocol, TypeVar

from contextledger.domain.values.errors import InvalidArgumentError, LedgerClosedError

__all__ = [
    "Gate",
    "Lifecycle",
    "Stoppable",
    "check_timeout",
    "close_all",
    "guard_methods",
    "stop_all",
]

log = logging.getLogger("contextledger.lifecycle")

C = TypeVar("C", bound=type)


class Gate(Protocol):
    """What code running the ledger's functions outside its public methods (an
    integration's own thread) passes, as the public methods do: ``enter`` admits one
    call or raises ``LedgerClosedError`` once ``close()`` has begun, ``leave`` counts it
    out (``close()`` waits for the calls in flight)."""

    def enter(self) -> None: ...

    def leave(self) -> None: ...


class Lifecycle:
    """The gate of one ledger: admits calls while open and counts those in flight;
    ``stop`` ends its background work and ``release`` closes its store, both once.

    An open gate takes no lock: a call counts itself in and out on two
    ``itertools.count`` objects (each ``next`` is one atomic step under CPython's GIL)
    and reads ``closed``. ``shut`` sets ``closed`` first and only then looks at the
    counts, and a call reads ``closed`` only after counting itself in, so a call
    either sees the gate shut (and leaves at once) or is counted by the drain. Once
    shut, calls that leave take the lock to wake the drain (or release the store).
    """

    __slots__ = (
        "_closed",
        "_drained",
        "_entered",
        "_handed",
        "_left",
        "_lock",
        "_release",
        "_released",
        "_stop",
        "name",
    )

    def __init__(
        self, *, stop: Callable[[], None], release: Callable[[], None], name: str = "ledger"
    ) -> None:
        self._entered = itertools.count()
        self._left = itertools.count()
        self._closed = False
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        #: Whether the store is released (or being released).
        self._released = False
        #: Whether the release is left to the last call in flight (a timed-out close).
        self._handed = False
        self._stop = stop
        self._release = release
        self.name = name

    @property
    def closed(self) -> bool:
        """True once ``close()`` has begun: every new call is refused."""
        return self._closed

    @property
    def in_flight(self) -> int:
        """Calls admitted and not finished yet (refused ones count for an instant)."""
        left = _value(self._left)
        return _value(self._entered) - left

    def check_open(self) -> None:
        """Raise ``LedgerClosedError`` once ``close()`` has begun."""
        if self._closed:
            raise LedgerClosedError(f"the {self.name} is closed")

    def enter(self) -> None:
        """Admit one call (``leave()`` must follow), or raise ``LedgerClosedError``."""
        next(self._entered)
        if self._closed:
            self.refuse()

    def refuse(self) -> NoReturn:
        """Count out a call that found the gate shut, and raise ``LedgerClosedError``."""
        self.leave()
        self.check_open()
        raise AssertionError("unreachable: the gate is shut")

    def leave(self) -> None:
        """One call has finished (the last one out after a timed-out close releases
        the store)."""
        next(self._left)
        if self._closed:
            self.left_after_shut()

    def left_after_shut(self) -> None:
        """A call has left a shut gate: wake the drain; the last one out after a
        timed-out close releases the store."""
        with self._lock:
            if self.in_flight:
                return
            self._drained.notify_all()
            release, self._handed = self._handed, False
            self._released = self._released or release
        if release:
            self._run(self._release, "release")

    def shut(self) -> bool:
        """Refuse every new call from now on; False if it was already shut."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
            return True

    def stop(self) -> None:
        """End the ledger's background work (its followers)."""
        self._run(self._stop, "stop")

    def release_when_idle(self, deadline: float) -> bool:
        """Release the store once no call is in flight, waiting until ``deadline``
        (``time.monotonic()``); False if calls still run then: the last of them
        releases it when it ends."""
        with self._lock:
            while self.in_flight and (remaining := deadline - time.monotonic()) > 0:
                self._drained.wait(min(remaining, 0.05))  # re-counts, should a wake be missed
            if in_flight := self.in_flight:
                self._handed = not self._released
                log.warning(
                    "%s closed with %d calls still in flight after the close timeout: "
                    "its store is released when they end",
                    self.name,
                    in_flight,
                )
                return False
            if self._released:
                return True
            self._released = True
        self._run(self._release, "release")
        return True

    def _run(self, action: Callable[[], None], what: str) -> None:
        try:
            action()
        except Exception as exc:  # closing goes on: the other stores are released still
            log.warning("%s: %s failed while closing: %s", self.name, what, exc)


class Stoppable(Protocol):
    """A follower of the log, as far as closing is concerned."""

    def stop(self) -> None: ...


def stop_all(followers: Iterable[Stoppable | None]) -> None:
    """Stop each follower in turn (None: a policy that never ran)."""
    for follower in followers:
        if follower is not None:
            follower.stop()


def check_timeout(timeout: object) -> float:
    """``timeout`` if it is a number of seconds, 0 or more; else ``InvalidArgumentError``."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise InvalidArgumentError(
            "timeout must be a number of seconds, 0 or more", argument="timeout", value=repr(timeout)
        )
    return float(timeout)


def close_all(lifecycles: Sequence[Lifecycle], timeout: float) -> bool:
    """Close a group of ledgers sharing calls (a sharded ledger's stores): all refuse
    new calls, then all stop their followers, then each store is released once its
    calls in flight end (waiting ``timeout`` seconds in all). False if some calls
    were still in flight at the deadline; a group already closing is left alone."""
    check_timeout(timeout)
    shut = [lifecycle for lifecycle in lifecycles if lifecycle.shut()]
    for lifecycle in shut:
        lifecycle.stop()
    deadline = time.monotonic() + max(0.0, timeout)
    drained = True
    for lifecycle in shut:
        drained = lifecycle.release_when_idle(deadline) and drained
    return drained


def _value(counter: itertools.count[int]) -> int:
    """The next value of ``counter``, without taking it."""
    return int(repr(counter)[6:-1])  # "count(5)"


def _guarded(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def guarded(self: Any, /, *args: Any, **kwargs: Any) -> Any:
        # Lifecycle.enter and .leave, inlined: the gate is on every call's path.
        gate: Lifecycle = self._lifecycle
        next(gate._entered)
        if gate._closed:
            gate.refuse()
        try:
            return function(self, *args, **kwargs)
        finally:
            next(gate._left)
            if gate._closed:
                gate.left_after_shut()

    guarded.__guarded__ = True  # type: ignore[attr-defined]
    return guarded


def guard_methods(cls: C, *, module_prefix: str, exempt: Collection[str]) -> C:
    """Route every public method of ``cls`` defined in a module under ``module_prefix``
    (not a property, static or class method, nor one of ``exempt``) through the
    instance's ``_lifecycle`` gate. Methods guarded already are left as they are."""
    seen: set[str] = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith(module_prefix):
            continue
        for name in vars(klass):
            if name.startswith("_") or name in exempt or name in seen:
                continue
            seen.add(name)
            current = inspect.getattr_static(cls, name)
            if inspect.isfunction(current) and not getattr(current, "__guarded__", False):
                setattr(cls, name, _guarded(current))
    return cls
