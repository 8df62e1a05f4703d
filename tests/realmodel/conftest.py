"""The real-model tier's server and what it records (run by `make test-llm`, see
scripts/test-llm.sh; deselected everywhere else by tests/conftest.py).

`llama_server` starts llama-cpp-python's OpenAI-compatible server with the SmolLM2-135M GGUF on a
free port of 127.0.0.1 (through scripts/llama-server.py) and stops it afterwards. `Wire` records
every chat request the client sends (through httpx event hooks: our code is not patched) and how
long each took, so the tier can check that each one carried `max_tokens` and print its cost.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

MODEL_ALIAS = "smollm2-135m-instruct"
LAUNCHER = Path(__file__).resolve().parents[2] / "scripts" / "llama-server.py"
"""`python -m llama_cpp.server` with weight repacking off (see the script's doc)."""
STARTUP_S = 300.0
STOP_S = 30.0


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture(scope="session")
def llama_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The server's API root (`http://127.0.0.1:PORT/v1`)."""
    python = os.environ.get("STRATAMEM_REALMODEL_PYTHON")
    gguf = os.environ.get("STRATAMEM_REALMODEL_GGUF")
    if not python or not gguf or not Path(gguf).is_file():
        pytest.skip("run the real-model tier with `make test-llm` (it builds the server venv)")
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    command = [
        python, str(LAUNCHER), "--model", gguf, "--model_alias", MODEL_ALIAS,
        "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--n_threads", "2",
    ]  # fmt: skip
    with log.open("wb") as out:
        server = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_until_up(server, base_url, log)
        yield base_url
    finally:
        server.terminate()
        try:
            server.wait(STOP_S)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def _wait_until_up(server: subprocess.Popen[bytes], base_url: str, log: Path) -> None:
    """Poll the models route of a process that loads a model (a real process: polling is the
    only way to know it is ready)."""
    deadline = time.monotonic() + STARTUP_S
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the llama.cpp server exited: {log.read_text(errors='replace')[-2000:]}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2.0).is_success:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    else:
        pytest.fail(f"the llama.cpp server did not answer within {STARTUP_S:g} s")
    _smoke(base_url, log)


def _smoke(base_url: str, log: Path) -> None:
    """One short completion, so a server that cannot decode fails here, with its log."""
    body = {"model": MODEL_ALIAS, "max_tokens": 4,
            "messages": [{"role": "user", "content": "Say hello to Maria, please."}]}  # fmt: skip
    try:
        httpx.post(f"{base_url}/chat/completions", json=body, timeout=120.0).raise_for_status()
    except httpx.HTTPError as exc:
        tail = log.read_text(errors="replace")[-2000:]
        pytest.fail(f"the llama.cpp server cannot complete a chat ({exc}): {tail}")


@dataclass
class Sent:
    stage: str
    body: dict[str, Any]
    seconds: float | None = None
    status: int | None = None


@dataclass
class Wire:
    """Every chat request sent, in order, with its stage, body, status and duration."""

    sent: list[Sent] = field(default_factory=list)
    _started: dict[int, tuple[Sent, float]] = field(default_factory=dict)

    def client(self, timeout_s: float) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=timeout_s,
            event_hooks={"request": [self._on_request], "response": [self._on_response]},
        )

    async def _on_request(self, request: httpx.Request) -> None:
        if not request.url.path.endswith("/chat/completions"):
            return
        stage = request.headers.get("x-stratamem-stage", "?")
        sent = Sent(stage, json.loads(request.content))
        self.sent.append(sent)
        self._started[id(request)] = (sent, time.perf_counter())

    async def _on_response(self, response: httpx.Response) -> None:
        found = self._started.pop(id(response.request), None)
        if found is not None:
            sent, started = found
            sent.seconds = time.perf_counter() - started
            sent.status = response.status_code
