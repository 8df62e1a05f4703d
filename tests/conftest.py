"""Fixtures shared by the whole suite."""

from __future__ import annotations

from stratamem.testing import scripted_llm_fixture

# A running scripted OpenAI-compatible server (stratamem.testing.ScriptedLLM), one per test.
scripted_llm = scripted_llm_fixture()
