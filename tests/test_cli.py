"""The CLI as other tools use it: JSON contracts, exit codes, imports that are all or nothing."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.offload.task_types import OFFLOAD_L1, OFFLOAD_L1_TIMER
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task

SAMPLE = Path(__file__).parent.parent / "src" / "stratamem" / "samples" / "conversation.jsonl"


def run(data_dir: Path, *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "--embedder", "none", *args])
    return result.exit_code, result.stdout, result.stderr


def test_capture_then_search_json_contract_in_a_real_process(tmp_path: Path) -> None:
    env = {**os.environ, "STRATAMEM_DATA_DIR": str(tmp_path), "STRATAMEM_EMBEDDER": "none"}
    base = [sys.executable, "-m", "stratamem.cli.main"]
    capture = subprocess.run(
        [*base, "capture", "--tenant", "t1", "--session", "s1", "--role", "user",
         "--text", "I keep bees on the roof", "--json"],
        env=env, capture_output=True, text=True, check=True,
    )
    captured = json.loads(capture.stdout)
    found = subprocess.run(
        [*base, "search", "--tenant", "t1", "--k", "5", "--json", "bees"],
        env=env, capture_output=True, text=True, check=True,
    )
    hits = json.loads(found.stdout)
    assert [h["id"] for h in hits] == captured["ids"]
    assert {"id", "layer", "text", "session", "score"} <= set(hits[0])
    assert (hits[0]["layer"], hits[0]["session"]) == ("L0", "s1")


def test_import_jsonl_sample_then_recall(tmp_path: Path) -> None:
    code, out, _ = run(tmp_path, "import", str(SAMPLE), "--tenant", "maya", "--json")
    assert code == 0
    assert json.loads(out)["tenants"]["maya"]["stored"] == 12
    code, out, _ = run(tmp_path, "recall", "--tenant", "maya", "--json", "who lent the van?")
    assert code == 0
    assert "Lena" in json.loads(out)["context"]
    code, out, _ = run(tmp_path, "import", str(SAMPLE), "--tenant", "maya", "--json")
    assert json.loads(out)["tenants"]["maya"] == {"stored": 0, "duplicates": 12}


def test_malformed_jsonl_line_fails_with_its_number_and_stores_nothing(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        '{"session": "s", "role": "user", "content": "fine"}\n{"session": "s", "role": \n',
        encoding="utf-8",
    )
    code, _, err = run(tmp_path, "import", str(bad), "--tenant", "t1")
    assert code == 2
    assert "bad.jsonl:2" in err
    code, _, err = run(tmp_path, "stats", "--json")
    assert (code, "no store" in err) == (5, True)  # not even an empty store was made


def test_unknown_role_in_jsonl_is_refused(tmp_path: Path) -> None:
    bad = tmp_path / "roles.jsonl"
    bad.write_text('{"session": "s", "role": "narrator", "content": "once"}\n', encoding="utf-8")
    code, _, err = run(tmp_path, "import", str(bad), "--tenant", "t1")
    assert (code, "unknown role" in err) == (2, True)


def test_bad_tenant_exits_with_input_error(tmp_path: Path) -> None:
    code, _, err = run(tmp_path, "capture", "--tenant", "../x", "--session", "s", "--text", "hi")
    assert code == 2
    assert "tenant" in err


@pytest.mark.parametrize("command", [["serve", "--port", "0"], ["stats"]])
def test_a_bad_setting_exits_with_config_error_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str]
) -> None:
    """Before anything opens: a typed error (exit 5) saying which variable, not a traceback."""
    monkeypatch.setenv("STRATAMEM_ONNX_SPINNING", "fast")
    monkeypatch.setenv("STRATAMEM_EMBED_BATCH_SIZE", "0")
    code, _, err = run(tmp_path, *command)
    assert code == 5, err
    assert "STRATAMEM_ONNX_SPINNING: Input should be a valid boolean" in err
    assert "STRATAMEM_EMBED_BATCH_SIZE: Input should be greater than or equal to 1" in err
    assert not (tmp_path / "stratamem.db").exists()


def test_stats_json(tmp_path: Path) -> None:
    run(tmp_path, "capture", "--tenant", "t1", "--session", "s", "--text", "hello")
    code, out, _ = run(tmp_path, "stats", "--tenant", "t1", "--json")
    assert code == 0
    assert json.loads(out)["L0"] == {"records": 1, "pending_embeddings": 1}


def test_stats_is_a_table(tmp_path: Path) -> None:
    run(tmp_path, "capture", "--tenant", "t1", "--session", "s", "--text", "hello")
    code, out, _ = run(tmp_path, "stats", "--tenant", "t1")
    assert code == 0 and "{" not in out
    header, l0, l1 = out.splitlines()[:3]
    assert header.split() == ["layer", "records", "pending", "embeddings"]
    assert l0.split() == ["L0", "turns", "1", "1"] and l1.split() == ["L1", "memories", "0", "0"]
    assert "sessions   1" in out


def test_erase_a_session_then_a_tenant(tmp_path: Path) -> None:
    code, _, _ = run(tmp_path, "import", str(SAMPLE), "--tenant", "maya", "--json")
    assert code == 0
    code, out, _ = run(tmp_path, "capture", "--tenant", "maya", "--session", "extra", "--role",
                       "user", "--text", "a note to forget", "--json")  # fmt: skip
    assert code == 0
    code, _, _ = run(tmp_path, "erase", "--tenant", "maya", "--session", "extra")
    assert code == 1  # asked for confirmation, none given: nothing erased
    code, out, _ = run(tmp_path, "erase", "--tenant", "maya", "--session", "extra", "--yes")
    assert code == 0 and json.loads(out)["erased"]["turns"] == 1
    code, out, _ = run(tmp_path, "stats", "--tenant", "maya", "--json")
    assert json.loads(out)["L0"]["records"] == 12
    code, out, _ = run(tmp_path, "erase", "--tenant", "maya", "--yes")
    assert code == 0 and json.loads(out)["erased"]["turns"] == 12
    code, out, _ = run(tmp_path, "stats", "--tenant", "maya", "--json")
    assert json.loads(out)["L0"]["records"] == 0


def test_erase_disarms_the_erased_sessions_pipeline_timers(tmp_path: Path) -> None:
    """The embedded pipeline's session timers name the session: the CLI's erase of a session or
    of a whole tenant clears them, as the service's routes do; another tenant's stay."""
    run(tmp_path, "capture", "--tenant", "maya", "--session", "a", "--text", "first note")
    run(tmp_path, "capture", "--tenant", "maya", "--session", "b", "--text", "second note")
    armed = [("maya", "a"), ("maya", "b"), ("bob", "a")]

    async def arm() -> None:
        backend = SqliteBackend(tmp_path / "pipeline.db")
        for tenant, session in armed:
            task = Task(OFFLOAD_L1, tenant, session)
            await backend.set_timer(OFFLOAD_L1_TIMER.key(tenant, session), task, due_at=9e9)
        await backend.close()

    async def left() -> list[tuple[str, str]]:
        backend = SqliteBackend(tmp_path / "pipeline.db")
        found = [(t, s) for t, s in armed
                 if await backend.get_timer(OFFLOAD_L1_TIMER.key(t, s)) is not None]  # fmt: skip
        await backend.close()
        return found

    asyncio.run(arm())
    assert run(tmp_path, "erase", "--tenant", "maya", "--session", "a", "--yes")[0] == 0
    assert asyncio.run(left()) == [("maya", "b"), ("bob", "a")]
    assert run(tmp_path, "erase", "--tenant", "maya", "--yes")[0] == 0
    assert asyncio.run(left()) == [("bob", "a")]


def test_erase_creates_no_pipeline_file(tmp_path: Path) -> None:
    run(tmp_path, "capture", "--tenant", "maya", "--session", "a", "--text", "a note")
    assert run(tmp_path, "erase", "--tenant", "maya", "--yes")[0] == 0
    assert not (tmp_path / "pipeline.db").exists()
