"""offload-l2: validated Mermaid, line-range edits, ids checked, orphans, fencing, size bounds."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.offload import ToolPair
from stratamem.offload.backlog import ORPHANS, offload_sources
from stratamem.offload.l1_summaries import run_l1
from stratamem.offload.l2_diagram import ORPHAN_NODE, diagram_timer_key, run_l2
from stratamem.offload.mermaid import Edit, InvalidDiagram, apply_edits, validate
from stratamem.offload.schedule import Stage, StageTask, l2_timer_key
from stratamem.offload.task_types import OFFLOAD_L2
from stratamem.pipeline.scheduler import BacklogScheduler
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.sqlite_backend import SqliteBackend
from stratamem.pipeline.task import Task
from stratamem.store.core.port import Fence
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus
from stratamem.store.layers.store import SqlLayerStore
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM

from . import model
from .conftest import Rig

T, S = "acme", "sess-1"
FLOW = 'flowchart TD\n    a["Read code"] --> b["Change code"]'


async def session_with_entries(rig: Rig, scripted_llm: ScriptedLLM, count: int = 2) -> str:
    scripted_llm.on("offload-l1", model.summaries)
    t0 = rig.clock.now()
    mark = await rig.offload.user_message(T, S, "Fix the parser", timestamp=t0)
    scripted_llm.push_for("offload-l15", model.judgment("Fix the parser"))
    await rig.run()
    pairs = [ToolPair(f"c{i}", "grep", {}, f"hit {i}", t0 + 1 + i) for i in range(count)]
    await rig.offload.ingest(T, S, pairs)
    await run_l1(rig.offload.deps, T, S)
    task_id = rig.store.get_mark(Scope(T), S, mark).task_id
    assert task_id is not None
    return task_id


def reply(rewrite: str | None, mapping: dict[str, str], edits: list[dict[str, object]]) -> Reply:
    items = [{"call_id": c, "node": n} for c, n in mapping.items()]
    return Reply.json({"rewrite": rewrite, "edits": edits, "mapping": items})


async def test_rewrite_then_line_range_edits(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    await session_with_entries(rig, scripted_llm, 1)
    scripted_llm.push_for("offload-l2", reply(FLOW, {"c0": "a"}, []))
    assert (await run_l2(rig.offload.deps, T, S)).mapped == 1
    pair = ToolPair("c5", "pytest", {}, "2 failed", rig.clock.now() + 5)
    await rig.offload.ingest(T, S, [pair])
    await run_l1(rig.offload.deps, T, S)
    edit = {"start": 3, "end": 2, "lines": ['b --> c["Run tests"]']}
    scripted_llm.push_for("offload-l2", reply(None, {"c5": "c"}, [edit]))
    outcome = await run_l2(rig.offload.deps, T, S)
    assert outcome.mapped == 1 and outcome.leftover == 0
    [diagram] = (await rig.offload.diagrams(T, S)).diagrams
    assert diagram.mermaid == FLOW + '\n    b --> c["Run tests"]' and diagram.version == 2
    numbered = scripted_llm.calls("offload-l2")[1].messages[1]["content"]
    assert '  2 |     a["Read code"] --> b["Change code"]' in numbered
    assert {e.call_id: e.node_id for e in await rig.offload.entries(T, S)} == {
        "c0": "a",
        "c5": "c",
    }


async def test_invalid_diagrams_and_unknown_ids_are_repaired_once(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    await session_with_entries(rig, scripted_llm, 2)
    scripted_llm.push_for(
        "offload-l2",
        reply('flowchart TD\n  a["x"] --> b\n  click a "javascript:alert(1)"', {"c0": "a"}, []),
        reply(FLOW, {"c0": "a", "c1": "b"}, []),
    )
    assert (await run_l2(rig.offload.deps, T, S)).mapped == 2
    repair = scripted_llm.calls("offload-l2")[1].messages[-1]["content"]
    assert "line 3 is not a node or edge statement" in repair

    pair = ToolPair("c7", "ls", {}, "files", rig.clock.now() + 9)
    await rig.offload.ingest(T, S, [pair])
    await run_l1(rig.offload.deps, T, S)
    bad_node = reply(FLOW, {"c7": "zzz"}, [])
    no_call = reply(FLOW, {"c0": "a"}, [])  # c0 was not among the new calls
    scripted_llm.push_for("offload-l2", bad_node, no_call)
    failed = await run_l2(rig.offload.deps, T, S)  # the task goes on: this diagram waits
    assert (failed.mapped, failed.leftover, failed.tasks) == (0, 0, ())
    [diagram] = (await rig.offload.diagrams(T, S)).diagrams
    assert diagram.version == 1  # nothing written
    assert [e.call_id for e in rig.store.unmapped_entries(Scope(T), S)] == ["c7"]
    layers = SqlLayerStore(rig.store._store)
    [failure] = layers.list_failures(Scope(T))
    assert (failure.kind, failure.stage, failure.status) == (
        FailureKind.STAGE, "offload-l2", FailureStatus.OPEN,
    )  # fmt: skip
    assert "zzz" in failure.raws[0] and "was not among the new calls" in failure.error

    mixed = reply(FLOW, {"c0": "a", "c7": "b"}, [])  # one bad item: dropped, the rest kept
    scripted_llm.push_for("offload-l2", mixed)
    assert (await run_l2(rig.offload.deps, T, S)).mapped == 1
    assert layers.get_failure(Scope(T), failure.id).status is FailureStatus.RESOLVED
    [note] = layers.list_failures(Scope(T), FailureQuery(kind=FailureKind.ITEM))
    assert "'c0' was not among the new calls" in note.error
    assert json.loads(note.raws[0]) == {"call_id": "c0", "node": "a"}


async def test_unmapped_leftovers_rearm_then_become_orphans(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    await session_with_entries(rig, scripted_llm, 2)
    scripted_llm.on("offload-l2", lambda request: reply(FLOW, {"c0": "a"}, []))
    outcome = await run_l2(rig.offload.deps, T, S)
    assert outcome.leftover == 1
    assert rig.runner.timers()[l2_timer_key(T, S)] == rig.clock.now() + 120

    rig.clock.advance(rig.offload.deps.settings.orphan_max_age_s)
    outcome = await run_l2(rig.offload.deps, T, S)
    assert outcome.orphaned == 1 and outcome.leftover == 0
    entries = {e.call_id: e.node_id for e in await rig.offload.entries(T, S)}
    assert entries == {"c0": "a", "c1": ORPHAN_NODE}
    [diagram] = (await rig.offload.diagrams(T, S)).diagrams
    validate(diagram.mermaid, 120, 6000)
    assert diagram.mermaid.count(ORPHAN_NODE) == 1


async def test_a_stale_fence_cannot_write_a_diagram(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    await session_with_entries(rig, scripted_llm, 1)
    scripted_llm.on("offload-l2", model.diagram)
    key = f"diagram/{T}/{S}"
    await run_l2(rig.offload.deps, T, S, Fence(key, 7))
    pair = ToolPair("c3", "ls", {}, "x", rig.clock.now() + 3)
    await rig.offload.ingest(T, S, [pair])
    await run_l1(rig.offload.deps, T, S)
    with pytest.raises(StaleFencingToken):
        await run_l2(rig.offload.deps, T, S, Fence(key, 6))
    assert [e.call_id for e in rig.store.unmapped_entries(Scope(T), S)] == ["c3"]


async def test_offline_diagrams_say_they_need_the_llm(offline_rig: Rig) -> None:
    outcome = await run_l2(offline_rig.offload.deps, T, S)
    assert outcome.note is not None and "STRATAMEM_LLM_BASE_URL" in outcome.note


def test_mermaid_bounds_and_edits() -> None:
    long = "flowchart TD\n" + "\n".join(f"n{i} --> n{i + 1}" for i in range(30))
    with pytest.raises(InvalidDiagram, match="at most 10 lines"):
        validate(long, 10, 6000)
    with pytest.raises(InvalidDiagram, match="200 characters are kept"):
        validate(long, 100, 200)
    for bad in ("graph XY\na", "flowchart TD\na[<b>x</b>]", "flowchart TD\nend", "a --> b"):
        with pytest.raises(InvalidDiagram):
            validate(bad, 50, 5000)
    text, nodes = validate("graph LR\n a -->|why| b((B)) -.-> c{C}\n subgraph s\n d\n end", 9, 999)
    assert nodes == {"a", "b", "c", "d"} and text.startswith("graph LR\n    a -->|why|")
    assert apply_edits("a\nb\nc", [Edit(2, 3, ("x",)), Edit(1, 0, ("h",))]) == "h\na\nx"
    with pytest.raises(InvalidDiagram, match="outside"):
        apply_edits("a", [Edit(3, 3, ())])
    with pytest.raises(InvalidDiagram, match="overlaps"):
        apply_edits("a\nb\nc", [Edit(1, 2, ()), Edit(2, 3, ())])


async def test_a_rewrite_may_not_drop_nodes_in_use(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    await session_with_entries(rig, scripted_llm, 1)
    scripted_llm.push_for("offload-l2", reply(FLOW, {"c0": "a"}, []))
    await run_l2(rig.offload.deps, T, S)
    await rig.offload.ingest(T, S, [ToolPair("c4", "ls", {}, "x", rig.clock.now() + 4)])
    await run_l1(rig.offload.deps, T, S)
    scripted_llm.push_for(
        "offload-l2",
        reply('flowchart TD\n    b["Change code"]', {"c4": "b"}, []),
        reply(FLOW, {"c4": "b"}, []),
    )
    assert (await run_l2(rig.offload.deps, T, S)).mapped == 1
    first, repair = scripted_llm.calls("offload-l2")[1:]
    assert "MUST STAY (earlier calls are mapped to them): a" in first.messages[1]["content"]
    assert "mapped to nodes it removed: ['a']" in repair.messages[-1]["content"]


def _bad_for(label: str) -> Callable[[RecordedRequest], Reply]:
    """offload-l2 replies: unusable (a node that is not there) for the task `label`, the
    stand-in model's diagram for every other."""

    def answer(request: RecordedRequest) -> Reply:
        if f"TASK: {label}" in model.user_text(request):
            return reply(FLOW, {"c0": "zzz"}, [])
        return model.diagram(request)

    return answer


async def second_task(rig: Rig, scripted_llm: ScriptedLLM) -> str:
    """A second task in the session, with one call (d0) routed to it."""
    t1 = rig.clock.now() + 10
    mark = await rig.offload.user_message(T, S, "Now write the docs", timestamp=t1)
    scripted_llm.push_for("offload-l15", model.judgment("Write the docs"))
    await rig.run()
    await rig.offload.ingest(T, S, [ToolPair("d0", "edit", {}, "done", t1 + 1)])
    await run_l1(rig.offload.deps, T, S)
    task_id = rig.store.get_mark(Scope(T), S, mark).task_id
    assert task_id is not None
    return task_id


async def test_a_bad_diagram_is_retried_on_its_own_timer_while_the_others_go_on(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """Issue 24: one task diagram whose reply stays unusable failed the whole offload-l2 task
    (a dead letter after its retries, and every entry of the session unmapped). Now it is
    recorded and retried alone on its own timer (60 s, then 300 s …), the other diagram is
    asked for and saved."""
    scripted_llm.on("offload-l2", _bad_for("Fix the parser"))
    parser = await session_with_entries(rig, scripted_llm, 1)
    docs = await second_task(rig, scripted_llm)
    outcome = await run_l2(rig.offload.deps, T, S)
    assert (outcome.tasks, outcome.mapped, outcome.leftover) == ((docs,), 1, 0)
    assert [e.call_id for e in rig.store.unmapped_entries(Scope(T), S)] == ["c0"]
    [failure] = SqlLayerStore(rig.store._store).list_failures(Scope(T))
    assert (failure.stage, failure.detail) == ("offload-l2", {"task": parser})
    now, timers = rig.clock.now(), rig.runner.timers()
    assert timers[diagram_timer_key(T, S, parser)] == now + 60

    rig.clock.advance(60)  # its retry, narrowed to it: unusable again, the next in 300 s
    await rig.run()
    assert rig.runner.timers()[diagram_timer_key(T, S, parser)] == rig.clock.now() + 300
    asked = [c.messages[1]["content"] for c in scripted_llm.calls("offload-l2")]
    assert sum("TASK: Write the docs" in text for text in asked) == 1  # saved: not asked again

    scripted_llm.on("offload-l2", model.diagram)  # the endpoint's model gets it right
    rig.clock.advance(300)
    await rig.run()
    assert rig.store.unmapped_entries(Scope(T), S) == []
    assert rig.runner.timers() == {}


async def test_a_flush_asks_for_a_bad_diagram_once_not_until_its_task_budget(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """A flushed run (`stratamem offload … --inline`, scripts) counts every timer as due: a
    diagram that stays unusable re-armed its retry timer and the run fired it again at once,
    10,000 times (the run's task budget), each an LLM call. Now a timer fires once per run;
    its retry waits for its time or the next run."""
    scripted_llm.on("offload-l2", _bad_for("Fix the parser"))
    parser = await session_with_entries(rig, scripted_llm, 1)
    await rig.offload.deps.scheduler.arm(
        diagram_timer_key(T, S, parser), StageTask(Stage.L2, T, S), rig.clock.now() + 60
    )
    report = await rig.runner.run(rig.offload, flush=True)
    assert len(report.done) <= 3 and len(scripted_llm.calls("offload-l2")) <= 4
    assert diagram_timer_key(T, S, parser) in rig.runner.timers()  # still owed, on its timer
    await rig.runner.run(rig.offload, flush=True)
    assert len(scripted_llm.calls("offload-l2")) <= 8


async def test_a_parked_session_still_gets_the_orphan_fallback(
    rig: Rig, scripted_llm: ScriptedLLM, tmp_path: Path
) -> None:
    """A session whose offload-l2 is a dead letter is parked by the backlog scheduler; the
    orphan fallback (no LLM) is still submitted for it, once its oldest unmapped entry is past
    the orphan age, and maps the entry to the orphan node."""
    scripted_llm.on("offload-l2", _bad_for("Fix the parser"))
    await session_with_entries(rig, scripted_llm, 1)
    backend = SqliteBackend(tmp_path / "pipeline.db")
    try:
        await backend.enqueue(Task(OFFLOAD_L2, T, S), now=rig.clock.now())
        [delivery] = await backend.consume("w", count=1, block_ms=0, now=rig.clock.now())
        await backend.dead_letter(delivery, "LLMOutputInvalid", now=rig.clock.now())
        age = rig.offload.deps.settings.orphan_max_age_s
        sources = offload_sources(rig.store, 0, diagrams=True, orphan_age_s=age)
        scheduler = BacklogScheduler(backend, sources, PipelineSettings(scheduler_limit=8))
        assert (await scheduler.run_pass(rig.clock.now())).submitted == []  # parked, too young
        rig.clock.advance(age)
        [task] = (await scheduler.run_pass(rig.clock.now())).submitted
        assert (task.type, task.session, task.payload) == (OFFLOAD_L2, S, {ORPHANS: True})
    finally:
        await backend.close()
    calls = len(scripted_llm.calls("offload-l2"))
    outcome = await rig.offload.run_l2(T, S, payload=task.payload)
    assert (outcome.orphaned, len(scripted_llm.calls("offload-l2"))) == (1, calls)
    assert {e.call_id: e.node_id for e in await rig.offload.entries(T, S)} == {"c0": ORPHAN_NODE}
