"""What the benchmark scripts say of the machine they ran on: the CPU's model, the
PostgreSQL server's version, the versions of the packages measured, load averages.

Each script composes its own lines from these (a report names what it depends on).
"""

from __future__ import annotations

from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path

__all__ = ["cpu_model", "load_text", "package_versions", "postgres_version"]


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, or ``"unknown"``."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


def postgres_version(url: str) -> str:
    """The server's ``server_version``, or ``"unreachable"`` (the report says so)."""
    try:
        import psycopg

        with psycopg.connect(url, connect_timeout=3) as conn:
            row = conn.execute("SHOW server_version").fetchone()
            return str(row[0]) if row else "?"
    except Exception:
        return "unreachable"


def package_versions(names: Iterable[str]) -> str:
    """``"name version, ..."`` for installed distributions."""
    return ", ".join(f"{name} {version(name)}" for name in names)


def load_text(load: Iterable[float]) -> str:
    """Load averages as ``"1.00 0.50 0.25"``."""
    return " ".join(f"{x:.2f}" for x in load)
