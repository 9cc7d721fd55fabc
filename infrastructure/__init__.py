"""Adapters: the pydantic event mapper, the tiktoken counter, the summarizers (the
Anthropic and Gemini ones load their SDK only when made), the SQL read models and
the command line.

Its modules live in rooms, one sub-package per concept, in this order from the top
(a room imports only rooms after it; tests/unit/test_structure.py checks):
cli, web, demo, readmodels, persistence, keys, summarizers, counting. Two loose
modules stay beside them, importing no room: ``tracing`` (OpenTelemetry spans, named
by topic) and ``readmodel_names`` (the read models' names, which the command line
reads without loading SQLAlchemy).
"""

from typing import TYPE_CHECKING

from contextledger._lazy import lazy_exports

if TYPE_CHECKING:
    from contextledger.infrastructure.counting.anthropic_counter import AnthropicCountingCounter
    from contextledger.infrastructure.counting.estimates import ClaudeCounter, GeminiCounter
    from contextledger.infrastructure.counting.tokens import TiktokenCounter, encoding_for_model
    from contextledger.infrastructure.keys.mapper import JSONBytesTranscoder, PydanticMapper
    from contextledger.infrastructure.keys.subject_keys import SubjectKeys
    from contextledger.infrastructure.readmodels import READ_MODEL_NAMES, SQLReadModels, attach_read_models
    from contextledger.infrastructure.summarizers.anthropic_summarizer import AnthropicSummarizer
    from contextledger.infrastructure.summarizers.gemini_summarizer import GeminiSummarizer

#: Each name loads on first use, from the module that defines it: the command line
#: (``contextledger.infrastructure.cli``) needs none of them to start.
_LAZY = {
    "AnthropicCountingCounter": "contextledger.infrastructure.counting.anthropic_counter",
    "AnthropicSummarizer": "contextledger.infrastructure.summarizers.anthropic_summarizer",
    "GeminiSummarizer": "contextledger.infrastructure.summarizers.gemini_summarizer",
    "ClaudeCounter": "contextledger.infrastructure.counting.estimates",
    "GeminiCounter": "contextledger.infrastructure.counting.estimates",
    "JSONBytesTranscoder": "contextledger.infrastructure.keys.mapper",
    "PydanticMapper": "contextledger.infrastructure.keys.mapper",
    "READ_MODEL_NAMES": "contextledger.infrastructure.readmodels",
    "SQLReadModels": "contextledger.infrastructure.readmodels",
    "attach_read_models": "contextledger.infrastructure.readmodels",
    "SubjectKeys": "contextledger.infrastructure.keys.subject_keys",
    "TiktokenCounter": "contextledger.infrastructure.counting.tokens",
    "encoding_for_model": "contextledger.infrastructure.counting.tokens",
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
