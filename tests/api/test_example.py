"""The integration guide's example runs against a real `stratamem serve`: the model is given the
memories it needs, and nothing it was given comes back as captured conversation."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from stratamem.client import Client
from tests.api.process import SRC, serving, stratamem

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_the_agent_loop_example_recalls_what_it_captured(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "demo")
    key = stratamem(data, "keys", "create", "demo").stdout.strip()
    with serving(data, tmp_path / "serve.log", "--workers", "1") as server:
        env = {"STRATAMEM_URL": server.url, "STRATAMEM_KEY": key, "PATH": "",
               "PYTHONPATH": str(SRC)}  # fmt: skip
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--session", "demo-1"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )
        with Client(server.url, key) as memory:
            turns = memory.turns("demo", "demo-1")
            memories = memory.list_memories("demo")
    assert done.returncode == 0, done.stderr
    last_prompt = done.stdout.split("user: What's my dog called")[0].rsplit("[the model reads]", 1)
    assert "Biscuit" in last_prompt[1] and "kilometres" in last_prompt[1]
    assert "session demo-1 ended: the layers wrote" in done.stdout
    answers = [t.text for t in turns if t.role.value == "assistant"]
    assert len(turns) == 6 and all("Biscuit" not in a and "stratamem" not in a for a in answers)
    assert not any("a model's answer" in m.content for m in memories)
