"""pytest fixtures of ``contextledger.testing`` (this module imports pytest).

Enable them in a ``conftest.py``::

    pytest_plugins = ["contextledger.testing.pytest_plugin"]

The plugin also adds this machine's loopback names to ``NO_PROXY``/``no_proxy`` for
the test run (``direct_to_loopback``): the SDKs read ``HTTP_PROXY``/``HTTPS_PROXY``
and would send their requests to the fake servers on 127.0.0.1 through a proxy,
which cannot reach them. Every other host keeps the proxy.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, MutableMapping

import pytest

from contextledger.testing.fake_openai import FakeOpenAIServer

__all__ = ["LOOPBACK_HOSTS", "direct_to_loopback", "fake_openai"]

#: The names this machine answers to on its loopback interface.
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "::1")


def direct_to_loopback(environ: MutableMapping[str, str] | None = None) -> None:
    """Add ``LOOPBACK_HOSTS`` to ``NO_PROXY`` and ``no_proxy`` in ``environ`` (the
    process's environment by default), keeping the hosts already there."""
    env = os.environ if environ is None else environ
    for name in ("NO_PROXY", "no_proxy"):
        hosts = [h.strip() for h in env.get(name, "").split(",") if h.strip()]
        env[name] = ",".join([*hosts, *(h for h in LOOPBACK_HOSTS if h not in hosts)])


def pytest_configure(config: pytest.Config) -> None:
    direct_to_loopback()


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A running ``FakeOpenAIServer`` with an empty script, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server
