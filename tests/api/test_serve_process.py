"""`stratamem serve` in a real process over a real socket; tenants and keys from the CLI."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.api.process import env_for_checkout, serving, stratamem, wait_for

pytestmark = pytest.mark.slow


def test_cli_keys_work_against_a_running_service(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    token = stratamem(data, "keys", "create", "alice", "--label", "agent").stdout.strip()
    key = json.loads(stratamem(data, "keys", "list", "--json").stdout)[0]
    assert token.startswith(f"smk_{key['key_id']}_")
    with serving(data, tmp_path / "serve.log") as server:
        auth = {"Authorization": f"Bearer {token}"}
        body = {"session": "s1", "messages": [{"role": "user", "content": "I keep bees"}]}
        captured = httpx.post(f"{server.url}/v1/capture", json=body, headers=auth)
        assert captured.status_code == 200
        found = httpx.post(
            f"{server.url}/v1/search/conversations", json={"query": "bees"}, headers=auth
        )
        assert [h["id"] for h in found.json()["hits"]] == captured.json()["ids"]
        stratamem(data, "keys", "revoke", key["key_id"])
        revoked = httpx.post(f"{server.url}/v1/recall", json={"query": "bees"}, headers=auth)
        assert revoked.status_code == 401
        assert server.stop() == 0  # SIGTERM: an orderly stop
    assert "Application shutdown complete" in (tmp_path / "serve.log").read_text()


def test_serve_runs_the_pipeline_a_queued_flush_gets_done(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    auth = {"Authorization": f"Bearer {stratamem(data, 'keys', 'create', 'alice').stdout.strip()}"}
    with serving(data, tmp_path / "serve.log", "--workers", "1") as server:
        body = {"session": "s1", "messages": [{"role": "user", "content": "I keep bees"}]}
        assert httpx.post(f"{server.url}/v1/capture", json=body, headers=auth).is_success
        queued = httpx.post(f"{server.url}/v1/sessions/s1/flush", headers=auth)
        assert queued.status_code == 202
        memories = wait_for(
            lambda: httpx.get(f"{server.url}/v1/memories", headers=auth).json(), bool
        )
        assert "bees" in memories[0]["content"]
    assert "1 pipeline consumers" in (tmp_path / "serve.log").read_text()


def test_api_only_serve_with_a_separate_worker_process(tmp_path: Path) -> None:
    """`serve --workers 0` schedules, `stratamem worker` (every executor of serve) executes."""
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    auth = {"Authorization": f"Bearer {stratamem(data, 'keys', 'create', 'alice').stdout.strip()}"}
    env = {"STRATAMEM_DATA_DIR": str(data), "STRATAMEM_EMBEDDER": "hash:64"}
    worker_log = tmp_path / "worker.log"
    with serving(data, tmp_path / "serve.log", "--workers", "0") as server, \
            worker_log.open("wb") as sink:
        worker = subprocess.Popen(
            [sys.executable, "-m", "stratamem.cli.main", "worker", "--executors",
             "stratamem.runtime:worker_registry"],
            env=env_for_checkout(env), stdout=sink, stderr=sink,
        )  # fmt: skip
        try:
            body = {"session": "s1", "messages": [{"role": "user", "content": "I keep bees"}]}
            assert httpx.post(f"{server.url}/v1/capture", json=body, headers=auth).is_success
            memories = wait_for(
                lambda: httpx.get(f"{server.url}/v1/memories", headers=auth).json(), bool
            )
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.wait(timeout=60)
    assert "bees" in memories[0]["content"]
    assert "API only" in (tmp_path / "serve.log").read_text()


def test_bad_settings_stop_serve_at_start_with_a_fix(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('[server]\nadmin_key = "short"\n')
    with pytest.raises(Exception) as caught:
        stratamem(tmp_path / "data", "serve", "--config", str(config))
    stderr = caught.value.stderr  # type: ignore[attr-defined]
    assert "STRATAMEM_SERVER_ADMIN_KEY" in stderr and "at least 32" in stderr
