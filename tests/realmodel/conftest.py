"""The real-model tier's server and what it records (run by `make test-llm`, see
scripts/test-llm.sh; deselected everywhere else by tests/conftest.py).

`llama_server` starts llama-cpp-python's OpenAI-compatible server with the SmolLM2-135M GGUF on a
free port of 127.0.0.1 (through scripts/llama-server.py) and stops it afterwards. `Wire` records
every chat request the client sends (through httpx event hooks: our code is not patched) and how
long each took, so the tier can check that each one carried `max_tokens` and print its cost.
`counted_server` is a proxy in front of the server that counts every request it is sent, the
eval subprocess's included (`Served`).
"""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import threading
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


@dataclass
class Served:
    """Every request the llama.cpp server was sent through the counting proxy, by path and
    stage: the tier's own clients and the processes it starts (the eval) alike."""

    requests: dict[tuple[str, str], int] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def count(self, path: str, stage: str) -> None:
        with self.lock:
            self.requests[(path, stage)] = self.requests.get((path, stage), 0) + 1

    @property
    def chats(self) -> int:
        return sum(n for (path, _), n in self.requests.items() if path.endswith("/completions"))


@pytest.fixture(scope="session")
def served() -> Served:
    return Served()


@pytest.fixture(scope="session")
def counted_server(llama_server: str, served: Served) -> Iterator[str]:
    """The API root of a proxy in front of the llama.cpp server that counts what it forwards."""
    upstream = llama_server.removesuffix("/v1")

    class Forward(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._forward(None)

        def do_POST(self) -> None:
            self._forward(self.rfile.read(int(self.headers.get("content-length") or 0)))

        def _forward(self, body: bytes | None) -> None:
            served.count(self.path, self.headers.get("x-stratamem-stage", "-"))
            headers = {"content-type": self.headers.get("content-type") or "application/json"}
            try:
                answer = httpx.request(self.command, upstream + self.path, content=body,
                                       headers=headers, timeout=3600.0)  # fmt: skip
            except httpx.HTTPError as exc:
                self.send_error(502, str(exc))
                return
            self.send_response(answer.status_code)
            self.send_header("content-type", answer.headers.get("content-type", "text/plain"))
            self.send_header("content-length", str(len(answer.content)))
            self.end_headers()
            self.wfile.write(answer.content)

        def log_message(self, format: str, *args: Any) -> None:
            return

    proxy = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Forward)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{proxy.server_address[1]}/v1"
    finally:
        proxy.shutdown()
        proxy.server_close()
