"""Adapters: the pydantic event mapper, the tiktoken counter, the summarizers, the SQL
read models and the command line."""

from contextledger.infrastructure.mapper import JSONBytesTranscoder, PydanticMapper
from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels, attach_read_models
from contextledger.infrastructure.tokens import TiktokenCounter, encoding_for_model

__all__ = [
    "READ_MODEL_NAMES",
    "JSONBytesTranscoder",
    "PydanticMapper",
    "SQLReadModels",
    "TiktokenCounter",
    "attach_read_models",
    "encoding_for_model",
]
