"""Serving the viewer with uvicorn, bound to loopback unless told otherwise."""

from __future__ import annotations

import ipaddress
import socket
import sys
from typing import TextIO

import uvicorn

from contextledger.infrastructure.persistence.database import Database
from contextledger.infrastructure.web.app import create_app

__all__ = ["exposed_warning", "is_loopback", "run"]


def is_loopback(address: str) -> bool:
    """Whether a bound address is reachable from this machine only."""
    try:
        return ipaddress.ip_address(address.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def exposed_warning(host: str) -> str:
    """The one line ``run`` prints when the viewer listens beyond this machine."""
    return (
        f"contextledger serve: warning: listening on {host}, reachable from other machines; "
        "the viewer has no authentication: anyone who can reach it reads every conversation "
        "(put it behind your own access control, or bind 127.0.0.1)"
    )


def run(
    database_url: str,
    host: str = "127.0.0.1",
    port: int = 8765,
    *,
    announce: TextIO | None = None,
) -> None:
    """Serve the viewer of the ledger at ``database_url`` until interrupted.

    The ledger is opened read-only (no summarization policy). The socket is bound
    before anything is announced, so once the line ``... at http://HOST:PORT/`` is on
    ``announce`` (default stderr) the viewer accepts connections; ``port=0`` picks a
    free port and the line names it. Bound to any address that is not loopback
    (``0.0.0.0``, a LAN address), it then prints one more line: a warning that the
    viewer has no authentication.
    """
    app = create_app(database_url)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(128)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        masked = Database.parse(database_url).masked
        out = announce or sys.stderr
        print(
            f"contextledger serve: {masked} at http://{shown}:{bound}/ (read-only; Ctrl-C stops)",
            file=out,
            flush=True,
        )
        if not is_loopback(sock.getsockname()[0]):
            print(exposed_warning(host), file=out, flush=True)
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
