"""Adapters: the pydantic event mapper, the tiktoken counter, the summarizers, the SQL
read models and the command line."""

from importlib import import_module
from typing import TYPE_CHECKING, Any

from contextledger.infrastructure.mapper import JSONBytesTranscoder, PydanticMapper
from contextledger.infrastructure.tokens import TiktokenCounter, encoding_for_model

if TYPE_CHECKING:
    from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels, attach_read_models

#: The SQL read models (SQLAlchemy) load on first use.
_LAZY = {"READ_MODEL_NAMES", "SQLReadModels", "attach_read_models"}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module 'contextledger.infrastructure' has no attribute {name!r}")
    value = getattr(import_module("contextledger.infrastructure.readmodels"), name)
    globals()[name] = value
    return value


__all__ = [
    "READ_MODEL_NAMES",
    "JSONBytesTranscoder",
    "PydanticMapper",
    "SQLReadModels",
    "TiktokenCounter",
    "attach_read_models",
    "encoding_for_model",
]
