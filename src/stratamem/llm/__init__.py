"""The LLM client for OpenAI-compatible chat endpoints, its settings, errors and usage meter."""

from __future__ import annotations

from stratamem.errors import LLMError
from stratamem.llm.base import LLM
from stratamem.llm.client import LLMClient
from stratamem.llm.errors import (
    LLMCircuitOpen,
    LLMEmptyReply,
    LLMEndpointTrouble,
    LLMHTTPError,
    LLMOutputInvalid,
    LLMRateLimited,
    LLMReplyTruncated,
    LLMServerError,
    LLMTimeout,
    LLMUnavailable,
)
from stratamem.llm.jsonparse import NoJSONFound, extract_json
from stratamem.llm.settings import LLMSettings, StageConfig, StageSettings
from stratamem.llm.usage import UsageMeter
from stratamem.llm.wire import Messages

__all__ = [
    "LLM",
    "LLMCircuitOpen",
    "LLMClient",
    "LLMEmptyReply",
    "LLMEndpointTrouble",
    "LLMError",
    "LLMHTTPError",
    "LLMOutputInvalid",
    "LLMRateLimited",
    "LLMReplyTruncated",
    "LLMServerError",
    "LLMSettings",
    "LLMTimeout",
    "LLMUnavailable",
    "Messages",
    "NoJSONFound",
    "StageConfig",
    "StageSettings",
    "UsageMeter",
    "extract_json",
]
