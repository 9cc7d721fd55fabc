"""Running a moment of a test as an unprivileged user (root reads and writes any file)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["NOBODY", "as_nobody"]

#: The uid and gid of ``nobody``.
NOBODY = 65534


@contextmanager
def as_nobody() -> Iterator[None]:
    """Within the block, the process's effective user is ``nobody`` (when it runs as
    root; otherwise it is unprivileged already). Modules are not readable by nobody
    where the interpreter lives under /root: import them before the block."""
    if os.geteuid() != 0:
        yield
        return
    os.setegid(NOBODY)
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
