"""pytest fixtures of ``contextledger.testing`` (this module imports pytest).

Enable them in a ``conftest.py``::

    pytest_plugins = ["contextledger.testing.pytest_plugin"]
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from contextledger.testing.fake_openai import FakeOpenAIServer

__all__ = ["fake_openai"]


@pytest.fixture
def fake_openai() -> Iterator[FakeOpenAIServer]:
    """A running ``FakeOpenAIServer`` with an empty script, stopped after the test."""
    with FakeOpenAIServer() as server:
        yield server
