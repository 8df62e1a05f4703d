"""Fixtures of the layer tests: a memory on a temporary store, an injected clock, and LLM
clients pointed at the scripted OpenAI-compatible server (real HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLMClient, LLMSettings
from stratamem.testing import RecordingSleep, ScriptedLLM

START = 1_715_166_000.0  # 2024-05-08 11:00 UTC, a Wednesday


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START)


def llm_settings(server: ScriptedLLM, **options: object) -> LLMSettings:
    values: dict[str, object] = {
        "base_url": server.base_url,
        "model": "scripted-chat",
        "timeout_s": 10.0,
        "max_attempts": 2,
        **options,
    }
    return LLMSettings.model_validate(values)


@pytest.fixture
def layer_settings() -> LayerSettings:
    return LayerSettings(max_batch_turns=10, context_turns=2)


@pytest.fixture
async def offline_memory(
    tmp_path: Path, clock: ManualClock, layer_settings: LayerSettings
) -> AsyncIterator[AsyncMemory]:
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64", background_embedding=False)
    core = AsyncMemory.open(settings, clock=clock, llm=None, layer_settings=layer_settings)
    yield core
    await core.aclose()


@pytest.fixture
async def llm_memory(
    tmp_path: Path,
    clock: ManualClock,
    layer_settings: LayerSettings,
    scripted_llm: ScriptedLLM,
) -> AsyncIterator[AsyncMemory]:
    client = LLMClient(llm_settings(scripted_llm), sleep=RecordingSleep())
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64", background_embedding=False)
    core = AsyncMemory.open(settings, clock=clock, llm=client, layer_settings=layer_settings)
    yield core
    await core.aclose()
    await client.aclose()
