"""The layer commands as a user runs them: offline flush, then memories, profile and scenes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply

CONVERSATION = [
    "I'm a nurse and I live in Lisbon.",
    "I ran a half marathon yesterday.",
    "Please always answer me in short bullet points.",
]


def run(data_dir: Path, *args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["--data-dir", str(data_dir), "--embedder", "none", *args])
    return result.exit_code, result.stdout + result.stderr


@pytest.fixture
def flushed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("STRATAMEM_LLM_BASE_URL", raising=False)
    monkeypatch.delenv("STRATAMEM_LLM_MODEL", raising=False)
    for i, text in enumerate(CONVERSATION):
        stamp = str(1_715_166_000 + i)
        code, out = run(tmp_path, "capture", "--tenant", "t1", "--session", "s1",
                        "--speaker", "Maria", "--timestamp", stamp, "--text", text)  # fmt: skip
        assert code == 0, out
    code, out = run(tmp_path, "flush", "--tenant", "t1", "--session", "s1", "--json")
    assert code == 0, out
    result = json.loads(out)
    assert result["l1"][0]["mode"] == "offline" and result["l3"]["changed"]
    return tmp_path


def test_memories_list_show_history(flushed: Path) -> None:
    code, out = run(flushed, "memories", "list", "--tenant", "t1", "--json")
    listed = json.loads(out)
    assert code == 0 and len(listed) == 3
    first = listed[0]["id"]
    code, out = run(flushed, "memories", "show", "--tenant", "t1", first, "--json")
    assert code == 0 and json.loads(out)["id"] == first
    code, out = run(flushed, "memories", "history", "--tenant", "t1", first, "--json")
    assert code == 0 and [m["id"] for m in json.loads(out)] == [first]
    code, out = run(flushed, "memories", "show", "--tenant", "t1", "m_nope")
    assert code == 3 and "no memory" in out


def test_profile_and_scenes(flushed: Path) -> None:
    code, out = run(flushed, "profile", "show", "--tenant", "t1")
    assert code == 0 and "bullet points" in out
    code, out = run(flushed, "scenes", "list", "--tenant", "t1", "--json")
    listed = json.loads(out)
    assert code == 0 and {s["title"] for s in listed} == {
        "Who the user is", "What happened", "Standing instructions",
    }  # fmt: skip
    code, out = run(flushed, "scenes", "show", "--tenant", "t1", listed[0]["id"], "--history")
    assert code == 0 and "v1" in out


def test_schedule_once_enqueues_due_sessions(flushed: Path) -> None:
    code, out = run(flushed, "capture", "--tenant", "t1", "--session", "s2",
                    "--text", "I adopted a cat.")  # fmt: skip
    assert code == 0, out
    code, out = run(flushed, "schedule", "--once")
    assert code == 0 and out.strip() == "L1 t1 s2"
    code, out = run(flushed, "pipeline", "status", "--json")
    assert code == 0 and json.loads(out)["depth"]["ready"] == 1


def test_failures_list_show_retry(
    tmp_path: Path, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted-chat")
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", lambda request: Reply.truncated('{"memories": [{"type": "pers'))
    code, out = run(tmp_path, "capture", "--tenant", "t1", "--session", "s1", "--speaker",
                    "Maria", "--text", CONVERSATION[0])  # fmt: skip
    assert code == 0, out
    code, out = run(tmp_path, "flush", "--tenant", "t1", "--session", "s1")
    assert code == 0 and "L1: 1 batch(es), 0 memories written" in out

    code, out = run(tmp_path, "failures", "list", "--tenant", "t1", "--json")
    [record] = json.loads(out)
    assert code == 0 and record["kind"] == "quarantine" and record["status"] == "open"
    assert record["raws"] == ['{"memories": [{"type": "pers']
    code, out = run(tmp_path, "failures", "list", "--tenant", "t1", "--status", "resolved")
    assert code == 0 and out == ""
    code, out = run(tmp_path, "failures", "show", "--tenant", "t1", record["id"])
    assert code == 0 and "LLMReplyTruncated" in out and '{"memories": [{"type": "pers' in out
    code, out = run(tmp_path, "failures", "show", "--tenant", "t2", record["id"])
    assert code == 3 and "no failure" in out  # another tenant's record is not found

    scripted_llm.on("L1", l1_reply)
    code, out = run(tmp_path, "failures", "retry", "--tenant", "t1", record["id"], "--json")
    assert code == 0, out
    assert json.loads(out)["failure"]["status"] == "resolved"
    code, out = run(tmp_path, "memories", "list", "--tenant", "t1")
    assert code == 0 and "Lisbon" in out
    code, out = run(tmp_path, "failures", "retry", "--tenant", "t1", record["id"])
    assert code == 1 and "resolved already" in out


def test_failures_retry_of_a_whole_session(
    tmp_path: Path, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted-chat")
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", lambda request: Reply.truncated('{"memories": [{"type": "pers'))
    for text in CONVERSATION[:2]:
        code, out = run(tmp_path, "capture", "--tenant", "t1", "--session", "s1", "--speaker",
                        "Maria", "--text", text)  # fmt: skip
        assert code == 0, out
    code, out = run(tmp_path, "flush", "--tenant", "t1", "--session", "s1")
    assert code == 0, out
    code, out = run(tmp_path, "failures", "retry", "--tenant", "t1", "--session", "s1")
    assert code == 0 and "resolved 0, still open 0, skipped 0, failed 2" in out, out

    scripted_llm.on("L1", l1_reply)
    code, out = run(tmp_path, "failures", "retry", "--tenant", "t1", "--kind", "quarantine",
                    "--json")  # fmt: skip
    assert code == 0, out
    assert len(json.loads(out)["resolved"]) == 2 and json.loads(out)["failed"] == {}
    code, out = run(tmp_path, "failures", "retry", "--tenant", "t1", "f_x", "--session", "s1")
    assert code == 2 and "give a failure ID, or filters" in out


def test_stats_count_the_turn_ledger_and_reextract_reads_nothing_turns_again(
    tmp_path: Path, scripted_llm: ScriptedLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", scripted_llm.base_url)
    monkeypatch.setenv("STRATAMEM_LLM_MODEL", "scripted-chat")
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", lambda request: Reply.json({"memories": []}))
    for text in CONVERSATION[:2]:
        code, out = run(tmp_path, "capture", "--tenant", "t1", "--session", "s1", "--speaker",
                        "Maria", "--text", text)  # fmt: skip
        assert code == 0, out
    assert run(tmp_path, "flush", "--tenant", "t1", "--session", "s1")[0] == 0
    code, out = run(tmp_path, "stats", "--tenant", "t1")
    assert code == 0 and "s1: nothing_to_remember 2" in out, out

    scripted_llm.on("L1", l1_reply)
    code, out = run(tmp_path, "reextract", "--tenant", "t1", "--session", "s1")
    assert code == 0 and "2 turn(s) read again in 1 batch(es)" in out and "extracted 2" in out
    code, out = run(tmp_path, "stats", "--tenant", "t1", "--json")
    assert json.loads(out)["turn_outcomes_by_session"]["s1"]["extracted"] == 2
