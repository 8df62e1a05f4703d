"""`make run`'s script starts the service, and the curl lines of the README's quickstart and of
the integration guide's loop work on it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.api.process import env_for_checkout, running

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
DEFAULT_URL = "http://127.0.0.1:8420"


def _sh_block(doc: str, heading: str) -> str:
    """The first shell block after `heading` in `doc`."""
    section = (ROOT / doc).read_text(encoding="utf-8").split(heading, 1)[1]
    return section.split("```sh\n", 1)[1].split("```", 1)[0]


def _run_env(tmp_path: Path) -> dict[str, str]:
    return env_for_checkout({
        "STRATAMEM_PYTHON": sys.executable,
        "STRATAMEM_DATA_DIR": str(tmp_path / "stratamem-data"),
        "STRATAMEM_EMBEDDER": "hash:64",
        "STRATAMEM_SERVER_PORT": "0",
    })  # fmt: skip


@pytest.mark.skipif(shutil.which("curl") is None, reason="the quickstart uses curl")
def test_run_script_and_quickstart_curl_lines(tmp_path: Path) -> None:
    env = _run_env(tmp_path)
    script = [str(ROOT / "scripts" / "run-service.sh")]
    with running(script, tmp_path / "run.log", env) as server:
        block = _sh_block("README.md", "## Quickstart: the service")
        block = block.replace(DEFAULT_URL, server.url)
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block], cwd=tmp_path, env=env,
            capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    captured, recalled, found, health = _json_documents(done.stdout, 4)
    assert captured["stored"] == captured["ids"]
    assert "Biscuit" in recalled["context"]
    assert found["hits"][0]["id"] == captured["ids"][0]
    assert health["status"] == "ok"
    assert "stratamem_http_requests_total" in done.stdout
    assert (tmp_path / "run.log").read_text().count("created tenant demo") == 1


@pytest.mark.skipif(shutil.which("curl") is None, reason="the guide uses curl")
def test_the_integration_guides_loop_in_http(tmp_path: Path) -> None:
    env = _run_env(tmp_path)
    script = [str(ROOT / "scripts" / "run-service.sh")]
    with running(script, tmp_path / "run.log", env) as server:
        block = _sh_block("docs/integration.md", "## The loop, in HTTP")
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", block.replace(DEFAULT_URL, server.url)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr
    recalled, captured, flushed = _json_documents(done.stdout, 3)
    assert {"context", "stable", "hits", "stats"} <= recalled.keys()
    assert len(captured["stored"]) == 2
    assert flushed["queued"]["type"] == "flush"


def _json_documents(text: str, count: int) -> list[dict[str, Any]]:
    """The first `count` JSON documents of curl's output (printed without newlines between)."""
    decoder, found, at = json.JSONDecoder(), [], 0
    for _ in range(count):
        document, at = decoder.raw_decode(text, at)
        found.append(document)
    return found
