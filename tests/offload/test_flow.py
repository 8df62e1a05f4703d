"""The whole offload flow through the scripted server: ingest → summaries → judgment → diagram
→ compaction → read-back."""

from __future__ import annotations

import json
from typing import Any

from stratamem.domain import Mode, Scope
from stratamem.offload import Level, TaskStatus, ToolPair
from stratamem.offload.schedule import l1_timer_key, l2_timer_key
from stratamem.testing import ScriptedLLM

from . import model
from .conftest import Rig

T, S = "acme", "sess-1"


def big_result(i: int) -> str:
    lines = [f"line {n}: log entry {i}.{n} status=ok value={n * i}" for n in range(60)]
    lines[41] = f"line 41: NEEDLE-{i} stack trace: KeyError in auth/login.py:{100 + i}"
    return "\n".join(lines)


def pairs(t0: float, count: int, start: int = 0) -> list[ToolPair]:
    return [
        ToolPair(
            call_id=f"call_{i}",
            tool="read_file" if i % 2 else "run_tests",
            params={"path": f"src/mod{i}.py"},
            result=big_result(i),
            timestamp=t0 + i,
            duration_ms=12.5,
        )
        for i in range(start, start + count)
    ]


def chat(tool_pairs: list[ToolPair], question: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "Fix the failing login test"},
    ]
    for pair in tool_pairs:
        call = {"id": pair.call_id, "type": "function",
                "function": {"name": pair.tool, "arguments": json.dumps(pair.params)}}  # fmt: skip
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": pair.call_id, "content": pair.output})
    messages.append({"role": "user", "content": question})
    return messages


async def test_ingest_summarise_judge_diagram_compact_read_back(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.on("offload-l1", model.summaries)
    scripted_llm.on("offload-l2", model.diagram)
    scripted_llm.push_for("offload-l15", model.judgment("Fix the login test", long_task=True))
    off, t0 = rig.offload, rig.clock.now()

    mark = await off.user_message(T, S, "Fix the failing login test", timestamp=t0)
    batch = pairs(t0, 4)
    result = await off.ingest(T, S, batch)
    assert result.stored == tuple(p.call_id for p in batch) and not result.enqueued
    assert rig.runner.timers() == {l1_timer_key(T, S): t0 + 30}

    await rig.run()  # the judgment runs at once; the summaries wait for their timer
    [task] = (await off.diagrams(T, S)).diagrams
    assert task.label == "Fix the login test" and task.status is TaskStatus.ACTIVE
    assert task.long_task
    assert await off.entries(T, S) == []

    rig.clock.advance(31)
    await rig.run()
    entries = await off.entries(T, S)
    assert [e.call_id for e in entries] == [p.call_id for p in batch]
    assert {e.mode for e in entries} == {Mode.LLM}
    assert [e.score for e in entries] == [8, 2, 8, 2]
    assert [e.timestamp for e in entries] == [p.timestamp for p in batch]
    assert {e.task_id for e in entries} == {task.task_id}
    assert rig.runner.timers()[l2_timer_key(T, S)] == rig.clock.now() + 120

    rig.clock.advance(121)
    await rig.run()
    [task] = (await off.diagrams(T, S)).diagrams
    assert task.mermaid.startswith("flowchart TD") and task.version == 1
    assert {e.node_id for e in await off.entries(T, S)} == {"work"}
    assert len(scripted_llm.calls("offload-l2")) == 1

    messages = chat(batch, "Is it fixed now?")
    total = sum(len(json.dumps(m)) for m in messages) // 4
    compaction = await off.compact(T, S, messages, budget_tokens=int(total * 1.1))
    assert compaction.level is Level.AGGRESSIVE
    assert compaction.replaced == ("call_0", "call_2")  # read_file results score too low
    assert compaction.tokens_after < compaction.tokens_before
    assert compaction.diagrams == (task.task_id,)
    note = compaction.messages[1]["content"]
    assert "```mermaid" in note and entries[0].ref_id in note
    assert compaction.messages[-1] == messages[-1]

    back = await off.read_back(T, entries[2].ref_id, max_tokens=100_000)
    assert back.text == batch[2].output and back.complete
    part = await off.read_back(T, entries[2].ref_id, query="NEEDLE-2 KeyError", max_tokens=60)
    assert "NEEDLE-2" in part.text and not part.complete and len(part.text) <= 240
    assert mark in {m.mark_id for m in rig.store.recent_marks(Scope(T), S, t0 + 1, 5)}
