"""`stratamem serve` in a real process against bad connections and with a credential in its
LLM endpoint's URL: it runs out of file descriptors and recovers without a restart, checks its
descriptors at start, and never lets the endpoint's password out (answers, records, log)."""

from __future__ import annotations

import os
import resource
import socket
import subprocess
import sys
from contextlib import ExitStack
from pathlib import Path

import httpx
import pytest

from stratamem.testing import ScriptedLLM
from tests.api.process import env_for_checkout, serving, stratamem, wait_for

pytestmark = pytest.mark.slow

SECRET = "hunter2-endpoint-password"


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_running_out_of_descriptors_and_getting_them_back_needs_no_restart(
    tmp_path: Path,
) -> None:
    env = {"STRATAMEM_SERVER_HEADER_TIMEOUT_S": "300"}  # only the exhaustion closes them
    with serving(tmp_path / "data", tmp_path / "serve.log", env=env) as server:
        pid = server.proc.pid
        for _ in range(20):  # the service at work first: its threads and their connections
            assert health(server.url) == 200
        _, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (open_fds(pid) + 64, hard))
        host, port = server.url.removeprefix("http://").split(":")
        with ExitStack() as held:
            for _ in range(300):  # far more than the process may now open
                held.enter_context(socket.create_connection((host, int(port)), timeout=10))
            wait_for(lambda: (server.log.read_text(), health(server.url)), _answered)
        wait_for(lambda: health(server.url), lambda status: status == 200)  # all released
        assert server.proc.poll() is None
    log = (tmp_path / "serve.log").read_text()
    assert "WARNING stratamem.api.connections: out of file descriptors" in log, log
    assert "Traceback" not in log, log


def health(url: str) -> int | None:
    try:
        return httpx.get(f"{url}/v1/health", timeout=10).status_code
    except httpx.TransportError:
        return None


def _answered(seen: tuple[str, int | None]) -> bool:
    log, status = seen
    return "out of file descriptors" in log and status == 200


def test_a_descriptor_limit_too_low_for_the_connection_bound_stops_serve_at_start(
    tmp_path: Path,
) -> None:
    def low_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))

    command = [sys.executable, "-m", "stratamem.cli.main", "--data-dir", str(tmp_path / "d"),
               "--embedder", "hash:64", "serve", "--port", "0"]  # fmt: skip
    done = subprocess.run(command, env=env_for_checkout(), preexec_fn=low_limit, check=False,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 5, done.stderr
    assert "STRATAMEM_SERVER_MAX_CONNECTIONS=1000" in done.stderr
    assert "at most 256" in done.stderr


def test_an_endpoint_password_is_in_no_answer_record_or_log(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    auth = {"Authorization": f"Bearer {stratamem(data, 'keys', 'create', 'alice').stdout.strip()}"}
    with ScriptedLLM() as llm:  # the base URL with a query has no chat route: 404
        endpoint = llm.base_url.removesuffix("/v1")
        base = llm.base_url.replace("http://", f"http://admin:{SECRET}@") + "?key=" + SECRET
        env = {"STRATAMEM_LLM_BASE_URL": base, "STRATAMEM_LLM_MODEL": "m",
               "STRATAMEM_PIPELINE_RETRY_LIMIT": "0"}  # fmt: skip
        with serving(data, tmp_path / "serve.log", "--workers", "1", env=env) as server:
            answers = tenant_answers(server.url, auth)
    log = (tmp_path / "serve.log").read_text()
    assert f"the layers call m at {endpoint}" in log  # the operator sees host and port
    failed = "WARNING stratamem.api.errors: POST /v1/sessions/s1/flush failed: LLMHTTPError:"
    assert f"{failed} stage L1: {endpoint} answered HTTP 404" in log, log  # one line, with why
    assert "Traceback" not in log, log
    for text in [*answers, log, *stored_bytes(data)]:
        assert SECRET not in text
    for text in answers:
        assert endpoint not in text, text  # a tenant does not even see where it is
    assert "stage L1: the endpoint answered HTTP 404" in answers[0]  # the route of ?key=…


def tenant_answers(url: str, auth: dict[str, str]) -> list[str]:
    """A waited flush that fails, then the failure records and dead letters it left."""
    body = {"session": "s1", "messages": [{"role": "user", "content": "I keep bees"}]}
    assert httpx.post(f"{url}/v1/capture", json=body, headers=auth).is_success
    flushed = httpx.post(f"{url}/v1/sessions/s1/flush?wait=true", headers=auth, timeout=60)
    assert flushed.status_code == 502
    dead = wait_for(lambda: httpx.get(f"{url}/v1/dead-letters", headers=auth), _listed)
    failures = httpx.get(f"{url}/v1/failures", headers=auth)
    assert failures.json()
    return [flushed.text, dead.text, failures.text]


def _listed(response: httpx.Response) -> bool:
    return bool(response.json())


def stored_bytes(data: Path) -> list[str]:
    """Every file of the data directory (databases, WAL), as text."""
    return [p.read_bytes().decode("latin-1") for p in data.rglob("*") if p.is_file()]


def test_the_start_line_says_whether_the_layers_run_offline(tmp_path: Path) -> None:
    with serving(tmp_path / "data", tmp_path / "serve.log") as server:
        assert server.stop() == 0
    first = (tmp_path / "serve.log").read_text().splitlines()[0]
    assert "the layers run offline: no LLM endpoint" in first, first
