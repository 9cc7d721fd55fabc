"""A PostgreSQL server of the test's own, on a free port, that the test may stop and
start (the shared server must never be restarted under other tests).

It uses the binaries of the installed PostgreSQL (``/usr/lib/postgresql/*/bin``).
PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres``
user and its commands run through ``runuser``.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

__all__ = ["OwnPostgres", "postgres_binaries"]


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL's ``bin`` folder (None: none installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class OwnPostgres:
    """``initdb`` into a temporary folder; ``start``, ``stop``, ``restart``, ``close``."""

    def __init__(self) -> None:
        bin_dir = postgres_binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql")
        self.bin = bin_dir
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="cl-own-pg-"))
        self.data = self.folder / "data"
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.folder, "postgres", "postgres")
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self.as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, cwd=self.folder)

    def start(self) -> None:
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
