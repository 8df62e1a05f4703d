"""`stratamem offload …`: ingest, entries, read, compact and diagrams, offline and with a model."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.pipeline.runner import load_registry
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.worker import Worker
from stratamem.testing import ScriptedLLM

from . import model
from .test_pipeline import never

RESULT = "\n".join(f"row {i}: value {i * 3}" for i in range(300))


def run(data_dir: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "--embedder", "none", *args])
    return result.exit_code, result.stdout, result.stderr


def write_session(tmp_path: Path) -> Path:
    lines = [
        {"user": "Load the sales table and find odd rows", "timestamp": 100.0, "id": "u1"},
        {"call_id": "call_1", "tool": "sql", "params": {"q": "select *"}, "result": RESULT,
         "timestamp": 101.0, "duration_ms": 40},
        {"call_id": "call_2", "tool": "sql", "params": {"q": "count"}, "result": "300",
         "timestamp": 102.0},
    ]  # fmt: skip
    path = tmp_path / "pairs.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in lines), encoding="utf-8")
    return path


@pytest.fixture
def no_llm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("STRATAMEM_LLM_BASE_URL", "STRATAMEM_LLM_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.usefixtures("no_llm")
def test_offline_ingest_read_compact(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out, _ = run(data, "offload", "ingest", str(write_session(tmp_path)),
                       "--tenant", "t1", "--session", "s1", "--json")  # fmt: skip
    assert code == 0 and json.loads(out) == {
        "stored": 2, "boundaries": 1, "entries": 2, "failed": [],
    }  # fmt: skip
    code, out, _ = run(data, "offload", "entries", "--tenant", "t1", "--session", "s1")
    first = json.loads(out)[0]
    assert code == 0 and first["call_id"] == "call_1" and first["mode"] == "offline"

    code, out, _ = run(data, "offload", "read", first["ref_id"], "--tenant", "t1",
                       "--max-tokens", "100000")  # fmt: skip
    assert code == 0 and out == RESULT + "\n"

    context = [
        {"role": "user", "content": "Load the sales table"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "call_1"}]},
        {"role": "tool", "tool_call_id": "call_1", "content": RESULT},
        {"role": "user", "content": "So?"},
    ]
    path = tmp_path / "context.json"
    path.write_text(json.dumps(context), encoding="utf-8")
    code, out, _ = run(data, "offload", "compact", str(path), "--tenant", "t1",
                       "--session", "s1", "--budget", "2500", "--stats")  # fmt: skip
    stats = json.loads(out)
    assert code == 0 and stats["level"] == "mild" and stats["replaced"] == []  # score too low
    code, out, _ = run(data, "offload", "compact", str(path), "--tenant", "t1",
                       "--session", "s1", "--budget", "1450")  # fmt: skip
    compacted = json.loads(out)
    assert compacted["level"] == "emergency" and compacted["tokens_after"] < 800

    code, _, err = run(data, "offload", "diagrams", "--tenant", "t1", "--session", "s1")
    assert code == 0 and "need an LLM" in err
    code, _, err = run(data, "offload", "read", "../../x", "--tenant", "t1")
    assert code == 2 and "not valid" in err


def test_ingest_with_a_model_makes_diagrams(
    tmp_path: Path, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted-chat")
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l2", model.diagram)
    scripted_llm.on("offload-l15", lambda request: model.judgment("Find odd rows"))
    data = tmp_path / "data"
    code, _, err = run(data, "offload", "ingest", str(write_session(tmp_path)),
                       "--tenant", "t1", "--session", "s1")  # fmt: skip
    assert code == 0, err
    code, out, _ = run(data, "offload", "diagrams", "--tenant", "t1", "--session", "s1")
    assert code == 0 and "## Find odd rows (active" in out and "flowchart TD" in out


@pytest.mark.usefixtures("no_llm")
async def test_ingest_hands_the_stages_to_pipeline_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    monkeypatch.setenv("STRATAMEM_DATA_DIR", str(data))
    monkeypatch.setenv("STRATAMEM_OFFLOAD_L1_BATCH", "1")
    args = ("offload", "ingest", str(write_session(tmp_path)), "--tenant", "t1",
            "--session", "s1", "--stages", "pipeline", "--json")  # fmt: skip
    code, out, _ = await asyncio.to_thread(run, data, *args)
    assert code == 0 and json.loads(out)["entries"] == 0
    backend = SqliteBackend(data / "pipeline.db")
    try:
        queued = await backend.list_tasks(limit=10)
        assert sorted(t.type.name for t in queued) == ["offload-l1", "offload-l15"]
        registry = load_registry("stratamem.runtime:offload_registry")
        worker = Worker(backend, registry, PipelineSettings(), name="w", sleep=never)
        for delivery in await backend.consume("c", count=10, block_ms=0, now=time.time()):
            await worker.handle(delivery)
    finally:
        await backend.close()
    code, out, _ = await asyncio.to_thread(run, data, "offload", "entries",
                                           "--tenant", "t1", "--session", "s1")  # fmt: skip
    assert code == 0 and [e["call_id"] for e in json.loads(out)] == ["call_1", "call_2"]


@pytest.mark.usefixtures("no_llm")
def test_resubmit_runs_waiting_work(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, _, _ = run(data, "offload", "ingest", str(write_session(tmp_path)), "--tenant", "t1",
                     "--session", "s1", "--stages", "none")  # fmt: skip
    assert code == 0
    code, out, _ = run(data, "offload", "resubmit", "--tenant", "t1", "--session", "s1")
    assert code == 0 and json.loads(out) == {
        "pending_pairs": 2, "unjudged": ["u1"], "unmapped": 0, "failed": [],
    }  # fmt: skip
    code, out, _ = run(data, "offload", "entries", "--tenant", "t1", "--session", "s1")
    assert [e["task_id"] is not None for e in json.loads(out)] == [True, True]
