"""Forgetting with an LLM's layers (the scripted server): a memory updated from two sessions is
drawn partly from the erased one and is derived again from the turns left; the model's scenes
and profile are purged and written again offline; the profile's lineage names the scene
versions and the profile version it was written from."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Mode
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLMClient
from stratamem.store.lineage.rows import PROFILE, SCENE
from stratamem.testing import RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers
from tests.layers.conftest import llm_settings

TENANT = "acme"


@pytest.fixture
async def memory(tmp_path: Path, scripted_llm: ScriptedLLM) -> AsyncIterator[AsyncMemory]:
    client = LLMClient(llm_settings(scripted_llm), sleep=RecordingSleep())
    layers = LayerSettings(max_batch_turns=10, context_turns=2, reconcile_min_similarity=-1.0)
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64", background_embedding=False)
    core = AsyncMemory.open(settings, clock=ManualClock(1_715_166_000.0), llm=client,
                            layer_settings=layers)  # fmt: skip
    yield core
    await core.aclose()
    await client.aclose()


async def test_a_memory_drawn_from_two_sessions_is_derived_again_from_the_one_left(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await memory.capture(TENANT, "s1", [{"role": "user", "speaker": "Maria",
                                         "text": "I'm a nurse and I live in Lisbon."}])
    await memory.flush(TENANT, "s1")
    memory.clock.advance(86400)  # type: ignore[attr-defined]
    scripted_llm.push_for("L1-reconcile", Reply.json({"decisions": [
        {"memory": "N1", "action": "update", "targets": ["E1"],
         "content": "Maria is a nurse who lived in Lisbon and moved to Porto."}]}))
    await memory.capture(TENANT, "s2", [{"role": "user", "speaker": "Maria",
                                         "text": "I moved to Porto, still a nurse."}])
    await memory.flush(TENANT, "s2")  # fmt: skip
    profile = await memory.profile_lineage(TENANT)
    kinds = {ref.kind for ref in profile.sources}
    assert SCENE in kinds and "memory" in kinds
    if profile.record.version > 1:  # a rewrite names the version the model saw
        assert any(ref.kind == PROFILE for ref in profile.sources)

    erased = await memory.erase_session(TENANT, "s1")

    assert erased["memories"] == 2 and erased["rederived"] == 1
    [left] = await memory.list_memories(TENANT)
    assert left.mode is Mode.OFFLINE and "Porto" in left.content and "Lisbon" not in left.content
    assert left.metadata["rederived_from"]
    shown = [m.content for m in await memory.memory_history(TENANT, left.id)]
    for scene in await memory.scenes(TENANT):
        shown += [f"{v.title} {v.summary} {v.body}"
                  for v in await memory.scene_history(TENANT, scene.id)]  # fmt: skip
    shown += [p.body for p in await memory.profile_history(TENANT)]
    assert not [text for text in shown if "Lisbon" in text], shown
    lineage = await memory.memory_lineage(TENANT, left.id)
    assert [ref.kind for ref in lineage.sources] == ["turn"]
