"""Fixtures of the layer tests: a memory on a temporary store, an injected clock, and LLM
clients pointed at the scripted OpenAI-compatible server (real HTTP)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import LLMError
from stratamem.layers.model import StageResult
from stratamem.layers.service import LayerService, Run
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


async def settle_l1(
    service: LayerService,
    session: str,
    *,
    tenant: str = "acme",
    per_run: Callable[[], None] = lambda: None,
    runs: int = 500,
    retries: int = 50,
) -> list[StageResult]:
    """Run L1 until the session is caught up, as the pipeline would: a task that fails in
    transport is retried under the same id. Returns every commit's result, those a failed task
    kept of what it had settled before the failure included (receipts `<task>@<cursor>`);
    `per_run` is called after each attempt."""
    results: list[StageResult] = []
    scope = Scope(tenant)
    for n in range(runs):
        for _ in range(retries):
            cursor = service.layers.session_state(scope, session).cursor_seq
            try:
                result = await service.run_l1(Run(tenant, f"task-{n}", session))
            except LLMError:
                kept = service.evidence.receipt(scope, f"task-{n}@{cursor}")
                results += [StageResult.replay(kept.result)] if kept else []
                continue
            finally:
                per_run()
            break
        else:
            pytest.fail("a transport failure never cleared")
        if result.skipped:
            return results
        results.append(result)
    pytest.fail("the session never caught up")
