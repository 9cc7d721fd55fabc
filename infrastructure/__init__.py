"""Adapters: the pydantic event mapper, the tiktoken counter, the summarizers, the SQL
read models and the command line."""

from contextledger.infrastructure.mapper import JSONBytesTranscoder, PydanticMapper
from contextledger.infrastructure.tokens import TiktokenCounter, encoding_for_model

__all__ = ["JSONBytesTranscoder", "PydanticMapper", "TiktokenCounter", "encoding_for_model"]
