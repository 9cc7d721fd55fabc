"""The read-only audit viewer (``contextledger serve``): what did the model see, and why?

Needs the ``web`` extra (``pip install "contextledger[web]"``). Nothing in the core
imports this package; the ``serve`` command loads it when it runs.

May import: demo, readmodels, persistence, keys, summarizers, counting, the layer's
loose modules, the application layer and the domain.
"""

from contextledger.infrastructure.web.app import PAGE_SIZE, create_app
from contextledger.infrastructure.web.server import run

__all__ = ["PAGE_SIZE", "create_app", "run"]
