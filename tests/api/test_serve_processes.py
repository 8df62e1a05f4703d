"""`stratamem serve --processes 2`: two API processes on one port over the one embedded store,
each answering captures and recalls, the first doing the pipeline's and the embedding's work for
both, and all of it stopped in order by one SIGTERM."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from stratamem.config import Settings
from stratamem.domain import Scope
from stratamem.store.opening import open_store
from tests.api.process import serving, stratamem, wait_for

pytestmark = pytest.mark.slow

#: New connections tried before both processes must have answered one (each is the kernel's
#: pick among the two listening sockets: missing one of them 60 times is a chance of 2^-59).
CONNECTIONS = 60
_PID = re.compile(r"^stratamem_api_process_id (\d+)$", re.MULTILINE)


def _pid(client: httpx.Client) -> int:
    found = _PID.search(client.get("/metrics").raise_for_status().text)
    assert found is not None
    return int(found.group(1))


def test_two_api_processes_share_the_store_and_stop_in_order(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stratamem(data, "tenants", "create", "alice")
    auth = {"Authorization": f"Bearer {stratamem(data, 'keys', 'create', 'alice').stdout.strip()}"}
    log = tmp_path / "serve.log"
    captured: dict[int, list[str]] = {}
    with serving(data, log, "--processes", "2", "--workers", "1") as server:
        for n in range(CONNECTIONS):
            with httpx.Client(base_url=server.url, headers=auth) as client:  # one connection
                pid = _pid(client)
                said = {"role": "user", "content": f"I keep bees in hive {n}"}
                body = {"session": f"s{n}", "messages": [said]}
                stored = client.post("/v1/capture", json=body).raise_for_status().json()["stored"]
                recalled = client.post("/v1/recall", json={"query": f"hive {n}"}).raise_for_status()
                assert stored[0] in {hit["id"] for hit in recalled.json()["hits"]}
                assert _pid(client) == pid  # a connection stays with its process
                captured.setdefault(pid, []).extend(stored)
            if len(captured) == 2:
                break
        assert len(captured) == 2, f"one process answered all {CONNECTIONS} connections"
        everyone = [turn for turns in captured.values() for turn in turns]
        with httpx.Client(base_url=server.url, headers=auth) as client:
            # the first process embeds what either captured, and its consumers run every L1
            stats = wait_for(lambda: client.get("/v1/stats").json(),
                             lambda s: s["L0"]["pending_embeddings"] == 0)  # fmt: skip
            assert stats["L0"]["records"] == len(everyone)
            memories = wait_for(
                lambda: client.get("/v1/memories", params={"limit": 500}).json(),
                lambda found: {t for m in found for t in m["source_turn_ids"]} >= set(everyone),
            )
            assert memories
        assert server.stop() == 0  # one SIGTERM stops both processes in order
    text = log.read_text()
    assert text.count("Application shutdown complete") == 2
    assert "2 API processes" in text and "1 pipeline consumers in the first" in text
    store = open_store(Settings(data_dir=data, embedder="hash:64"))
    try:  # nothing acknowledged is lost
        assert [t.id for t in store.get_turns(Scope("alice"), everyone)] == everyone
    finally:
        store.close()
