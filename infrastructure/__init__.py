"""Adapters: the pydantic event mapper, the tiktoken counter, the summarizers (the
Anthropic and Gemini ones load their SDK only when made), the SQL read models and
the command line."""

from typing import TYPE_CHECKING

from contextledger._lazy import lazy_exports

if TYPE_CHECKING:
    from contextledger.infrastructure.anthropic_counter import AnthropicCountingCounter
    from contextledger.infrastructure.anthropic_summarizer import AnthropicSummarizer
    from contextledger.infrastructure.estimates import ClaudeCounter, GeminiCounter
    from contextledger.infrastructure.gemini_summarizer import GeminiSummarizer
    from contextledger.infrastructure.mapper import JSONBytesTranscoder, PydanticMapper
    from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels, attach_read_models
    from contextledger.infrastructure.subject_keys import SubjectKeys
    from contextledger.infrastructure.tokens import TiktokenCounter, encoding_for_model

#: Each name loads on first use, from the module that defines it: the command line
#: (``contextledger.infrastructure.cli``) needs none of them to start.
_LAZY = {
    "AnthropicCountingCounter": "contextledger.infrastructure.anthropic_counter",
    "AnthropicSummarizer": "contextledger.infrastructure.anthropic_summarizer",
    "GeminiSummarizer": "contextledger.infrastructure.gemini_summarizer",
    "ClaudeCounter": "contextledger.infrastructure.estimates",
    "GeminiCounter": "contextledger.infrastructure.estimates",
    "JSONBytesTranscoder": "contextledger.infrastructure.mapper",
    "PydanticMapper": "contextledger.infrastructure.mapper",
    "READ_MODEL_NAMES": "contextledger.infrastructure.readmodels",
    "SQLReadModels": "contextledger.infrastructure.readmodels",
    "attach_read_models": "contextledger.infrastructure.readmodels",
    "SubjectKeys": "contextledger.infrastructure.subject_keys",
    "TiktokenCounter": "contextledger.infrastructure.tokens",
    "encoding_for_model": "contextledger.infrastructure.tokens",
}


__all__ = [
    "READ_MODEL_NAMES",
    "AnthropicCountingCounter",
    "AnthropicSummarizer",
    "ClaudeCounter",
    "GeminiCounter",
    "GeminiSummarizer",
    "JSONBytesTranscoder",
    "PydanticMapper",
    "SQLReadModels",
    "SubjectKeys",
    "TiktokenCounter",
    "attach_read_models",
    "encoding_for_model",
]

__getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals(), __all__)
