"""The integration guide's example runs against a real `stratamem serve`."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.api.process import serving, stratamem

pytestmark = pytest.mark.slow
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "agent_loop.py"


def test_the_agent_loop_example_recalls_what_it_captured(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "demo")
    key = stratamem(data, "keys", "create", "demo").stdout.strip()
    with serving(data, tmp_path / "serve.log", "--workers", "1") as server:
        env = {"STRATAMEM_URL": server.url, "STRATAMEM_KEY": key, "PATH": ""}
        done = subprocess.run(
            [sys.executable, str(EXAMPLE), "--session", "demo-1"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )
    assert done.returncode == 0, done.stderr
    last_answer = done.stdout.split("user: What's my dog called")[1]
    assert "Biscuit" in last_answer and "kilometres" in last_answer
    assert "session demo-1 ended: flush task" in done.stdout
