"""One end-to-end test, run in both modes: through the scripted LLM server, and offline with no
endpoint at all. Capture → L1 → L2 → L3 → recall shows memories, the profile and the scene index."""

from __future__ import annotations

import pytest

from stratamem.core import AsyncMemory
from stratamem.domain import Mode, Scope
from stratamem.testing import ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

TURNS = [
    {"role": "user", "speaker": "Maria", "text": "I'm a nurse and I live in Lisbon."},
    {"role": "assistant", "text": "Nice to meet you, Maria."},
    {"role": "user", "speaker": "Maria", "text": "I ran a half marathon yesterday."},
    {"role": "user", "speaker": "Maria", "text": "I love grilled sardines."},
]


@pytest.fixture(params=[Mode.LLM, Mode.OFFLINE], ids=["llm", "offline"])
def memory(request: pytest.FixtureRequest) -> AsyncMemory:
    if request.param is Mode.OFFLINE:
        made: AsyncMemory = request.getfixturevalue("offline_memory")
        assert made.llm is None
        return made
    install_layer_handlers(request.getfixturevalue("scripted_llm"))
    made = request.getfixturevalue("llm_memory")
    return made


async def test_capture_to_recall(memory: AsyncMemory, request: pytest.FixtureRequest) -> None:
    await memory.capture("acme", "s1", TURNS)
    result = await memory.flush("acme", "s1")

    mode = Mode.OFFLINE if memory.llm is None else Mode.LLM
    assert result.l1[0].mode is mode and result.l1[0].changed
    assert result.l2 is not None and result.l2.changed
    assert result.l3 is not None and result.l3.changed
    memories = memory.store.list_memories(Scope("acme"))
    assert len(memories) == 3 and {m.mode for m in memories} == {mode}
    assert memory.layers is not None
    assert memory.layers.session_state(Scope("acme"), "s1").cursor_seq == 4

    recall = await memory.recall("acme", "what did Maria run", include_turns=False)
    assert "half marathon" in recall.context
    assert "User profile:" in recall.stable and "Scenes:" in recall.stable
    if mode is Mode.LLM:
        server: ScriptedLLM = request.getfixturevalue("scripted_llm")
        assert set(server.usage()) == {"L1", "L2", "L3"}
