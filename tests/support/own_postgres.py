"""A PostgreSQL server of the test's own, on a free port, that the test may stop and
start (the shared server must never be restarted under other tests).

It uses the binaries of the installed PostgreSQL (``/usr/lib/postgresql/*/bin``).
PostgreSQL refuses to run as root: as root, the cluster belongs to the ``postgres``
user and its commands run through ``runuser``. A new server's data folder is a copy of
one ``initdb`` run per process (``_initdb_template``).

``OwnPostgres.standby_of(primary)`` makes a hot standby of a running one: a
``pg_basebackup -R`` copy of its data folder (streaming replication, the
``primary_conninfo`` written by ``-R``), started on a port of its own.
``synchronous=True`` also names it in the primary's ``synchronous_standby_names``,
so a commit on the primary returns once the standby has flushed it.

``primary.base_backup(folder)`` takes a plain base backup (``pg_basebackup -X stream``,
no ``-R``: no ``standby.signal``, no ``primary_conninfo``), and
``OwnPostgres.from_backup(folder)`` starts a copy of it on a port of its own: it
recovers from the WAL in the backup and comes up read-write, independent of the
server it was taken from.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import glob
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

__all__ = ["OwnPostgres", "postgres_binaries"]


def postgres_binaries() -> Path | None:
    """The newest installed PostgreSQL's ``bin`` folder (None: none installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    return Path(found[-1]).parent if found else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _alive(pid: int) -> bool:
    """Whether process ``pid`` still runs (a zombie does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@functools.cache
def _initdb_template(bin_dir: Path) -> Path:
    """A data folder made by ``initdb`` once per process (removed at exit), that each
    new server copies: an empty cluster, trust authentication, superuser ``postgres``.
    Every server made from it is a fresh one of its own; they only share the cluster's
    system identifier, as a standby shares its primary's."""
    folder = Path(tempfile.mkdtemp(prefix="cl-own-pg-template-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    command = [
        str(bin_dir / "initdb"),
        "-D",
        str(folder / "data"),
        "-A",
        "trust",
        "-U",
        "postgres",
        "--no-sync",
    ]
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(folder, "postgres", "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    subprocess.run(command, check=True, capture_output=True, cwd=folder)
    return folder / "data"


class OwnPostgres:
    """``initdb`` into a temporary folder; ``start``, ``stop``, ``restart``, ``close``."""

    def __init__(self, *, initdb: bool = True) -> None:
        bin_dir = postgres_binaries()
        if bin_dir is None:
            raise RuntimeError("no PostgreSQL binaries under /usr/lib/postgresql")
        self.bin = bin_dir
        self.port = _free_port()
        self.folder = Path(tempfile.mkdtemp(prefix="cl-own-pg-"))
        self.data = self.folder / "data"
        self.as_root = os.geteuid() == 0
        #: The standby's name in its primary's ``pg_stat_replication`` (None: a primary).
        self.standby_name: str | None = None
        #: The primary that waits for this standby's flush (a synchronous standby).
        self.synchronous_for: OwnPostgres | None = None
        if self.as_root:
            shutil.chown(self.folder, "postgres", "postgres")
        if initdb:
            # A copy of this process's one initdb (``cp -a`` keeps the postgres user's
            # ownership and the folder's modes): the same empty cluster in a tenth of
            # the time.
            subprocess.run(["cp", "-a", str(_initdb_template(bin_dir)), str(self.data)], check=True)

    @classmethod
    def standby_of(cls, primary: OwnPostgres, *, synchronous: bool = False) -> OwnPostgres:
        """A hot standby of ``primary`` (running), started: ``pg_basebackup -R`` streams
        its data folder and writes the ``primary_conninfo`` the standby follows it by.
        ``synchronous``: the primary's ``synchronous_standby_names`` names this standby
        (commits wait for its flush; the primary then needs it running to commit)."""
        standby = cls(initdb=False)
        standby.standby_name = f"standby_{standby.port}"
        try:
            conninfo = (
                f"host=127.0.0.1 port={primary.port} user=postgres application_name={standby.standby_name}"
            )
            standby._run(
                "pg_basebackup",
                "-D",
                str(standby.data),
                "-d",
                conninfo,
                "-R",
                "-X",
                "stream",
                "-c",
                "fast",
                "--no-sync",
            )
            standby.start()
            if synchronous:
                primary.execute(f"ALTER SYSTEM SET synchronous_standby_names = '{standby.standby_name}'")
                primary.execute("SELECT pg_reload_conf()")
                standby.synchronous_for = primary
            standby.wait_streaming(primary, synchronous=synchronous)
        except BaseException:
            standby.close()
            raise
        return standby

    def base_backup(self, folder: Path) -> Path:
        """A plain base backup of this (running) server in ``folder`` (created; it must
        not exist): ``pg_basebackup -X stream`` without ``-R``. Its path."""
        folder.mkdir(parents=True)
        if self.as_root:
            shutil.chown(folder, "postgres", "postgres")
        conninfo = f"host=127.0.0.1 port={self.port} user=postgres"
        self._run(
            "pg_basebackup", "-D", str(folder), "-d", conninfo, "-X", "stream", "-c", "fast", "--no-sync"
        )
        return folder

    @classmethod
    def from_backup(cls, backup: Path) -> OwnPostgres:
        """A server of its own started from a copy of the base backup in ``backup`` (the
        backup is left as it is): it recovers and comes up as a primary."""
        copy = cls(initdb=False)
        try:
            shutil.copytree(backup, copy.data)
            copy.data.chmod(0o700)
            if copy.as_root:
                for path in [copy.data, *copy.data.rglob("*")]:
                    shutil.chown(path, "postgres", "postgres")
            copy.start()
        except BaseException:
            copy.close()
            raise
        return copy

    def execute(self, statement: str) -> list[tuple[object, ...]]:
        """Run one statement (autocommit) on this server's ``postgres`` database; its rows."""
        with psycopg.connect(self.url, autocommit=True, connect_timeout=5) as conn:
            cursor = conn.execute(statement.encode())
            return list(cursor.fetchall()) if cursor.description else []

    def wait_streaming(self, primary: OwnPostgres, *, synchronous: bool, within: float = 30.0) -> None:
        """Wait until ``primary`` streams to this standby (in sync, if ``synchronous``)."""
        wanted = "sync" if synchronous else "async"
        deadline = time.monotonic() + within
        while True:
            rows = primary.execute(
                "SELECT sync_state FROM pg_stat_replication "
                f"WHERE application_name = '{self.standby_name}' AND state = 'streaming'"
            )
            if rows and rows[0][0] == wanted:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"standby {self.standby_name} is not streaming ({wanted}) from {primary.url}"
                )
            time.sleep(0.05)

    def replayed(self, primary: OwnPostgres, *, within: float = 30.0) -> None:
        """Wait until this standby has replayed everything ``primary`` has written now."""
        target = primary.execute("SELECT pg_current_wal_lsn()")[0][0]
        deadline = time.monotonic() + within
        while not self.execute(f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")[0][0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"standby {self.standby_name} did not replay up to {target}")
            time.sleep(0.02)

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
        self._run(
            "pg_ctl", "-D", str(self.data), "-o", options, "-l", str(self.folder / "log"), "-w", "start"
        )

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def kill(self) -> None:
        """``kill -9`` the server and every process of it, as a crash would."""
        pid = int((self.data / "postmaster.pid").read_text().split()[0])
        children = [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
        for victim in [pid, *children]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(victim, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while any(_alive(victim) for victim in [pid, *children]):
            assert time.monotonic() < deadline, "the killed server's processes did not end"
            time.sleep(0.02)

    def promote(self) -> None:
        """Promote this standby to a primary (``pg_ctl promote``, waiting for it)."""
        self._run("pg_ctl", "-D", str(self.data), "-w", "promote")
        self.standby_name = None

    def create_database(self, name: str) -> str:
        """Create database ``name`` (on a primary); its URL on this server."""
        self.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def database_url(self, name: str) -> str:
        """The URL of database ``name`` on this server."""
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        if self.synchronous_for is not None:  # the primary commits without it again
            with contextlib.suppress(psycopg.Error):
                self.synchronous_for.execute("ALTER SYSTEM RESET synchronous_standby_names")
                self.synchronous_for.execute("SELECT pg_reload_conf()")
            self.synchronous_for = None
        with contextlib.suppress(subprocess.CalledProcessError):  # not running
            self.stop()
        shutil.rmtree(self.folder, ignore_errors=True)
