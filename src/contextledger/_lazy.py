"""Names a package exports and loads on first use (PEP 562).

A package lists each public name with the module that defines it; ``lazy_exports``
gives the package's module ``__getattr__`` (which imports that module when the name
is first read, and keeps the value) and ``__dir__``. The layers' packages use it, so
``import contextledger.domain`` loads none of the layer's modules.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib import import_module
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(
    package: str, modules: Mapping[str, str], namespace: dict[str, Any], exported: Sequence[str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``, whose names are ``modules``' keys
    (each to the module defining it), ``namespace`` its ``globals()`` and
    ``exported`` its ``__all__``."""

    def __getattr__(name: str) -> Any:
        module = modules.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exported})

    return __getattr__, __dir__
