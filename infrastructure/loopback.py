"""Calls to a server on this machine go to it directly, whatever the proxy settings.

The SDKs read ``HTTP_PROXY``/``HTTPS_PROXY`` from the environment and send every
request through the proxy unless ``NO_PROXY`` names the host. A proxy cannot reach
this machine's loopback interface, so a summarizer or counter pointed at
``http://127.0.0.1:8000/v1`` (a local model server, a test's fake server) would fail
with a connection error on a machine that has a proxy set. Their clients get an HTTP
client that ignores the environment's proxies when, and only when, the base URL is a
loopback address; calls to a provider's own endpoint keep the proxy as configured.
"""

from __future__ import annotations

import ipaddress
from typing import Any, TypeVar, cast

__all__ = ["direct_if_loopback", "is_loopback"]

C = TypeVar("C")


def is_loopback(host: str | None) -> bool:
    """Whether ``host`` is this machine: ``localhost`` (and ``*.localhost``), an
    address in 127.0.0.0/8, or ``::1``."""
    if not host:
        return False
    name = host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def direct_if_loopback(client: C, sdk: Any) -> C:
    """``client`` (an ``openai.OpenAI`` or ``anthropic.Anthropic``), or, when its base URL
    is a loopback address, a copy whose HTTP client ignores the environment's proxies
    (the original is closed)."""
    sdk_client = cast(Any, client)
    if not is_loopback(sdk_client.base_url.host):
        return client
    direct = sdk_client.with_options(http_client=sdk.DefaultHttpxClient(trust_env=False))
    sdk_client.close()
    return cast(C, direct)
