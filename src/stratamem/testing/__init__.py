"""Test helpers for code built on stratamem, shipped with the package (like `structlog.testing`).

`ScriptedLLM` is a real OpenAI-compatible HTTP server whose replies a test scripts; `Reply`
builds the replies; `Endpoint` makes it take or refuse structured-output forms as llama.cpp,
Ollama or a plain server do; `scripted_llm_fixture()` makes a pytest fixture of it; `RecordingSleep`
is an injectable sleep that records delays instead of waiting.
"""

from __future__ import annotations

from stratamem.llm.wire import STAGE_HEADER, estimate_tokens
from stratamem.testing.endpoints import Endpoint
from stratamem.testing.replies import DEFAULT_STAGE, EMBEDDINGS_STAGE, RecordedRequest, Reply
from stratamem.testing.scripted_llm import ScriptedLLM, scripted_llm_fixture
from stratamem.testing.timing import RecordingSleep

__all__ = [
    "DEFAULT_STAGE",
    "EMBEDDINGS_STAGE",
    "STAGE_HEADER",
    "Endpoint",
    "RecordedRequest",
    "RecordingSleep",
    "Reply",
    "ScriptedLLM",
    "estimate_tokens",
    "scripted_llm_fixture",
]
