"""A real process killed while the model answers its L1 call: nothing is written, the turns and
the cursor are intact, and the next run writes every memory once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.llm import LLMClient
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply

from .conftest import llm_settings

SRC = Path(__file__).parent.parent.parent / "src"
TURNS = [
    {"role": "user", "speaker": "Maria", "text": "I'm a nurse and I live in Lisbon."},
    {"role": "user", "speaker": "Maria", "text": "I ran a half marathon yesterday."},
]


@pytest.mark.slow
async def test_killed_during_the_l1_call_then_rerun(
    tmp_path: Path, scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    settings = Settings(data_dir=tmp_path / "data", embedder="none")
    memory = AsyncMemory.open(settings, clock=clock, llm=None)
    await memory.capture("acme", "s1", TURNS)
    await memory.aclose()

    scripted_llm.push_for("L1", Reply.held(Reply.json({"memories": []})))
    env = {**os.environ, "PYTHONPATH": str(SRC), "STRATAMEM_DATA_DIR": str(settings.data_dir),
           "STRATAMEM_EMBEDDER": "none", "STRATAMEM_LLM_BASE_URL": scripted_llm.base_url,
           "STRATAMEM_LLM_MODEL": "scripted-chat"}  # fmt: skip
    child = subprocess.Popen(
        [sys.executable, "-m", "stratamem", "flush", "--tenant", "acme", "--session", "s1"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert await scripted_llm.until_held(1, timeout_s=30)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert child.returncode == -signal.SIGKILL

    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", l1_reply)
    client = LLMClient(llm_settings(scripted_llm))
    memory = AsyncMemory.open(settings, clock=clock, llm=client)
    try:
        assert memory.layers is not None
        assert memory.layers.session_state(Scope("acme"), "s1").cursor_seq == 0
        assert memory.store.list_memories(Scope("acme")) == []
        await memory.flush("acme", "s1")
        assert len(memory.store.list_memories(Scope("acme"))) == 2
        assert len(memory.store.list_turns(Scope("acme"), "s1")) == 2
    finally:
        await memory.aclose()
        await client.aclose()
