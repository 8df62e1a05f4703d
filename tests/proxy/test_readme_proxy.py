"""The README's memory proxy section, run as written against `make run`'s script with
`STRATAMEM_PROXY_UPSTREAM` pointing at the scripted server: the check from outside (curl, plain
and streamed, with the session header), the SDK's one-line change and the coding agent's two
variables."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from stratamem.testing import RecordedRequest, Reply, ScriptedLLM
from tests.api.process import ServeProcess, running
from tests.api.test_readme_quickstart import _run_env
from tests.proxy.conftest import UPSTREAM_KEY

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
SECTION = (ROOT / "README.md").read_text(encoding="utf-8").split(
    "## The memory proxy: any agent, one URL", 1
)[1].split("\n## ", 1)[0]
DEFAULT_URL = "http://127.0.0.1:8420"


def _blocks(lang: str) -> list[str]:
    return [part.split("```", 1)[0] for part in SECTION.split(f"```{lang}\n")[1:]]


def _answer(request: RecordedRequest) -> Reply:
    last = request.messages[-1]["content"]
    return Reply.text("You're welcome." if "Thanks" in last else "Your dog is called Biscuit.")


@pytest.fixture
def service(tmp_path: Path, scripted_llm: ScriptedLLM) -> Any:
    scripted_llm.handler = _answer
    env = {**_run_env(tmp_path), "STRATAMEM_PROXY_UPSTREAM": scripted_llm.base_url,
           "STRATAMEM_PROXY_UPSTREAM_KEY": UPSTREAM_KEY}  # fmt: skip
    with running([str(ROOT / "scripts" / "run-service.sh")], tmp_path / "run.log", env) as server:
        yield server, env


def _sse_and_json(text: str) -> tuple[list[dict[str, Any]], str, Any]:
    """curl's output: two JSON documents, the event stream, the turns (a JSON list)."""
    decoder, documents, at = json.JSONDecoder(), [], 0
    for _ in range(2):
        document, at = decoder.raw_decode(text, at)
        documents.append(document)
    events, _, turns = text[at:].partition("data: [DONE]\n\n")
    return documents, events, json.loads(turns)


@pytest.mark.skipif(shutil.which("curl") is None, reason="the README's check uses curl")
def test_the_check_from_outside(
    service: tuple[ServeProcess, dict[str, str]], scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    server, env = service
    [curl] = [b for b in _blocks("sh") if "curl" in b]
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", curl.replace(DEFAULT_URL, server.url)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    (captured, answer), events, turns = _sse_and_json(done.stdout)
    assert len(captured["stored"]) == 1
    assert answer["choices"][0]["message"]["content"] == "Your dog is called Biscuit."
    chunks = [json.loads(line[6:]) for line in events.splitlines() if line.startswith("data: ")]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks
                   if c["choices"]) == "You're welcome."  # fmt: skip
    first, second = scripted_llm.calls(path="/v1/chat/completions")
    assert "Biscuit" in first.messages[-1]["content"].split("</stratamem-recall>")[0]
    assert second.body["stream"] is True
    assert {first.headers["authorization"], second.headers["authorization"]} == {
        f"Bearer {UPSTREAM_KEY}"}  # fmt: skip
    assert [(t["role"], t["text"]) for t in turns] == [
        ("user", "What is my dog called?"), ("assistant", "Your dog is called Biscuit."),
        ("user", "Thanks!"), ("assistant", "You're welcome."),
    ]  # captured once each, and no recalled text  # fmt: skip


def test_the_sdks_one_line_and_the_agents_two_variables(
    service: tuple[ServeProcess, dict[str, str]],
    scripted_llm: ScriptedLLM,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    server, env = service
    [code] = _blocks("python")
    monkeypatch.chdir(tmp_path)  # where `make run` left stratamem-data/demo.key
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code.replace(DEFAULT_URL, server.url), "README.md: proxy", "exec"), {})
    assert printed.getvalue() == "Your dog is called Biscuit.\n"
    [exports] = [b for b in _blocks("sh") if "export" in b]
    agent = "python -c 'from openai import OpenAI; print(OpenAI().models.list().data[0].id)'"
    done = subprocess.run(["bash", "-euo", "pipefail", "-c",
                           exports.replace(DEFAULT_URL, server.url) + agent],
                          cwd=tmp_path, env={**env, "PATH": _venv_path(env)}, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "scripted-chat"
    assert scripted_llm.calls(path="/v1/models")[-1].headers["authorization"] == (
        f"Bearer {UPSTREAM_KEY}"
    )


def _venv_path(env: dict[str, str]) -> str:
    python = Path(env["STRATAMEM_PYTHON"]).parent
    return f"{python}:{env.get('PATH', '')}"
