"""Corrections cascade (offline layers, both stores): a corrected or forgotten memory marks
what was built on it stale; the scheduler's stale sources find the tenant, and the next L2/L3
write the scenes and profile again, so neither keeps saying the old value."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.layers.backlog import layer_sources
from stratamem.layers.settings import LayerSettings
from stratamem.store.lineage.rows import CORRECTED, FORGOTTEN, PROFILE, SCENE, Ref
from tests.stores import store_url

TENANT = "acme"


@pytest.fixture
async def memory(
    request: pytest.FixtureRequest, store_kind: str, tmp_path: Path
) -> AsyncIterator[AsyncMemory]:
    url = None if store_kind == "sqlite" else store_url(request, store_kind, tmp_path)
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64",
                        background_embedding=False, store_url=url)  # fmt: skip
    opened = AsyncMemory.open(settings, clock=ManualClock(1_715_166_000.0), llm=None)
    await opened.capture(TENANT, "s1", [
        {"role": "user", "content": "I live in Lisbon near the old harbour."},
        {"role": "user", "content": "I love cooking fish on Sundays."},
    ])  # fmt: skip
    await opened.flush(TENANT, "s1")
    yield opened
    await opened.aclose()


async def _stale_tenants(memory: AsyncMemory) -> set[str]:
    assert memory.backlog is not None
    found: set[str] = set()
    for source in layer_sources(memory.backlog, LayerSettings(), 0.0):
        if source.kind.endswith("-stale"):
            page = await source.page(None, 10, memory.clock.now())
            found |= {owed.key for owed in page.items}
    return found


async def _built_text(memory: AsyncMemory) -> str:
    profile = await memory.profile(TENANT)
    scenes = [f"{s.title} {s.summary} {s.body}" for s in await memory.scenes(TENANT)]
    return "\n".join([profile.body if profile else "", *scenes])


async def test_a_corrected_memory_has_what_was_built_on_it_rebuilt(memory: AsyncMemory) -> None:
    lisbon = next(m for m in await memory.list_memories(TENANT) if "Lisbon" in m.content)
    assert "Lisbon" in await _built_text(memory)
    await memory.update_memory(TENANT, lisbon.id, content="User: I live in Porto by the river.")
    stale = memory._layer_store().stale(Scope(TENANT))
    assert set(stale.values()) == {CORRECTED} and Ref(PROFILE, "") in stale
    assert await _stale_tenants(memory) == {TENANT}
    recall = await memory.recall(TENANT, "where do I live?")
    assert "Lisbon" in recall.stable  # corrected, not forgotten: served until rebuilt

    await memory.flush(TENANT, "s1")

    built = await _built_text(memory)
    assert "Lisbon" not in built and "Porto" in built and "cooking fish" in built
    assert memory._layer_store().stale(Scope(TENANT)) == {}
    assert await _stale_tenants(memory) == set()


async def test_a_forgotten_memory_leaves_the_stable_block_until_rebuilt(
    memory: AsyncMemory,
) -> None:
    lisbon = next(m for m in await memory.list_memories(TENANT) if "Lisbon" in m.content)
    await memory.forget_memory(TENANT, lisbon.id)
    stale = memory._layer_store().stale(Scope(TENANT))
    assert set(stale.values()) == {FORGOTTEN} and any(r.kind == SCENE for r in stale)
    recall = await memory.recall(TENANT, "where do I live?", include_turns=False)
    assert "Lisbon" not in recall.stable and "Lisbon" not in recall.context  # its turn stays

    await memory.flush(TENANT, "s1")

    built = await _built_text(memory)
    assert "Lisbon" not in built and "cooking fish" in built
    assert "cooking fish" in (await memory.recall(TENANT, "what do I cook?")).stable
