"""Signals for the command line: Ctrl-C during long work, SIGTERM for the worker.

Long work (``rebuild``, ``replay --all``, ``stats`` catching up, ``demo``) runs inside
``interruptible()``: the first SIGINT only sets a flag, which the work's progress
callback turns into ``KeyboardInterrupt`` between two units of work (every read-model
event is written with its tracking row in one transaction, every append is one
transaction), so nothing is left half-written; the command exits 130. A second SIGINT
interrupts at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType

__all__ = ["interruptible", "stop_on_signals"]


@contextmanager
def interruptible() -> Iterator[Callable[[], bool]]:
    """While inside, SIGINT asks to stop; yields "has a stop been asked for?"."""
    asked = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield asked.is_set
        return
    previous = signal.getsignal(signal.SIGINT)

    def handler(_signum: int, _frame: FrameType | None) -> None:
        if asked.is_set():
            raise KeyboardInterrupt
        asked.set()

    signal.signal(signal.SIGINT, handler)
    try:
        yield asked.is_set
    finally:
        signal.signal(signal.SIGINT, previous)


def stop_on_signals(stop: threading.Event) -> Callable[[], None]:
    """SIGTERM and SIGINT set ``stop``; returns the function that restores the old handlers."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore
