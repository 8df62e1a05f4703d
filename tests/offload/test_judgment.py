"""offload-l15: judgments move the boundary by compare-and-set; concurrent ones never clobber."""

from __future__ import annotations

import asyncio

import pytest

from stratamem.domain import Mode, Scope
from stratamem.llm import LLMHTTPError
from stratamem.offload import TaskStatus, ToolPair
from stratamem.offload.l1_summaries import run_l1
from stratamem.offload.l15_judgment import JudgmentConflict, run_l15
from stratamem.offload.schedule import l2_timer_key
from stratamem.store.failures.records import FailureKind, FailureStatus
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.offload.records import Decision, DiagramWrite, JudgmentCommit, VersionConflict
from stratamem.testing import Reply, ScriptedLLM

from . import model
from .conftest import Rig

T, S = "acme", "sess-1"
#: A tool call between two messages, not summarised yet: both messages are judged.
WORK_BETWEEN = ToolPair("c0", "search", {"q": "rows"}, "2 hits", 0.0)


async def test_messages_that_arrive_together_cost_one_judgment(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """Four messages with nothing between them: the three older take the offline rule, the
    newest is judged by the model (it used to be 1 + 2 + 3 + 4 calls, each judgment moving the
    boundary under the others)."""
    t0 = rig.clock.now()
    texts = ["Build the CSV export", "with a header row", "and UTF-8", "then mail it to Ana"]
    marks = [await rig.offload.user_message(T, S, text, timestamp=t0 + i)
             for i, text in enumerate(texts)]  # fmt: skip
    scripted_llm.on("offload-l15", lambda request: model.judgment("CSV export"))
    outcomes = await asyncio.gather(*(run_l15(rig.offload.deps, T, S, m) for m in marks))
    assert len(scripted_llm.calls("offload-l15")) <= 2  # the newest, again if the others moved
    scope = Scope(T)
    judged = {m.mark_id: m for m in rig.store.recent_marks(scope, S, t0 + 10, 10)}
    assert all(m.judged for m in judged.values()) and len(judged) == 4
    assert rig.store.boundary(scope, S).active_task == judged[marks[-1]].task_id
    assert not any(o.skipped for o in outcomes)

    later = [await rig.offload.user_message(T, S, text, timestamp=t0 + 20 + i)
             for i, text in enumerate(["Now the PDF", "landscape"])]  # fmt: skip
    before = len(scripted_llm.calls("offload-l15"))
    for mark in later:  # one after the other: the older takes the rule, the newest one call
        await run_l15(rig.offload.deps, T, S, mark)
    assert len(scripted_llm.calls("offload-l15")) == before + 1


async def test_concurrent_judgments_on_one_session_never_clobber(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    t0 = rig.clock.now()
    first = await rig.offload.user_message(T, S, "Build the CSV export", timestamp=t0)
    await rig.offload.ingest(T, S, [WORK_BETWEEN])  # else only the newest would be judged
    second = await rig.offload.user_message(T, S, "Also fix the date parser", timestamp=t0 + 5)
    scripted_llm.push_for(
        "offload-l15",
        Reply.held(model.judgment("Task A")),
        Reply.held(model.judgment("Task B")),
        model.judgment("Task C"),  # the re-judgment of whichever lost the compare-and-set
    )

    async def release_when_both_wait() -> None:
        assert await scripted_llm.until_held(2)
        scripted_llm.release()

    one, two, _ = await asyncio.gather(
        run_l15(rig.offload.deps, T, S, first),
        run_l15(rig.offload.deps, T, S, second),
        release_when_both_wait(),
    )
    assert sorted([one.attempts, two.attempts]) == [1, 2]
    assert len(scripted_llm.calls("offload-l15")) == 3
    scope = Scope(T)
    marks = {m.mark_id: m for m in rig.store.recent_marks(scope, S, t0 + 10, 10)}
    assert all(m.judged for m in marks.values())
    assert marks[first].task_id != marks[second].task_id
    boundary = rig.store.boundary(scope, S)
    assert boundary.version == 2 and boundary.last_mark_ts == t0 + 5
    assert boundary.active_task == marks[second].task_id  # the newest message decides
    tasks = {d.task_id: d for d in (await rig.offload.diagrams(T, S)).diagrams}
    assert tasks[marks[second].task_id].status is TaskStatus.ACTIVE
    assert tasks[marks[first].task_id].status is TaskStatus.OPEN


async def test_a_stale_compare_and_set_is_refused(rig: Rig) -> None:
    scope, now = Scope(T), rig.clock.now()
    mark = await rig.offload.user_message(T, S, "Start", timestamp=now)
    decision = Decision(False, False, None, "Start")
    rig.store.apply_decision(scope, S, JudgmentCommit(mark, 0, decision, "t-1", now))
    with pytest.raises(VersionConflict):
        rig.store.apply_decision(scope, S, JudgmentCommit(mark, 0, decision, "t-2", now))


async def test_judgment_gives_up_after_its_attempts(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    mark = await rig.offload.user_message(T, S, "Start", timestamp=rig.clock.now())
    await rig.offload.ingest(T, S, [WORK_BETWEEN])
    other = await rig.offload.user_message(T, S, "Other", timestamp=rig.clock.now() + 1)
    scope = Scope(T)

    def meddle(request: object) -> Reply:  # another judgment lands during every call
        boundary = rig.store.boundary(scope, S)
        decision = Decision(False, False, None, "meddler")
        rig.store.apply_decision(
            scope, S, JudgmentCommit(other, boundary.version, decision, f"t-m{boundary.version}", 0)
        )
        return model.judgment("mine")

    scripted_llm.on("offload-l15", meddle)
    with pytest.raises(JudgmentConflict):
        await run_l15(rig.offload.deps, T, S, mark)
    assert not rig.store.get_mark(scope, S, mark).judged


async def test_continuing_an_earlier_task_routes_entries_and_arms_the_diagram(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.on("offload-l1", model.summaries)
    t0 = rig.clock.now()
    first = await rig.offload.user_message(T, S, "Write the report", timestamp=t0)
    scripted_llm.push_for("offload-l15", model.judgment("Write the report"))
    await rig.run()
    task_a = rig.store.get_mark(Scope(T), S, first).task_id
    second = await rig.offload.user_message(T, S, "Lunch plans?", timestamp=t0 + 10)
    scripted_llm.push_for("offload-l15", model.judgment("Lunch", completed=True))
    await rig.run()
    third = await rig.offload.user_message(T, S, "Back to the report", timestamp=t0 + 15)
    pair = ToolPair("c9", "search", {"q": "report"}, "3 hits", t0 + 20)
    await rig.offload.ingest(T, S, [pair])
    await run_l1(rig.offload.deps, T, S)  # before the judgment: the entry waits, unrouted
    [waiting] = await rig.offload.entries(T, S)
    assert waiting.task_id is None and l2_timer_key(T, S) not in rig.runner.timers()
    scripted_llm.push_for("offload-l15", model.judgment(None, continues=task_a))
    await rig.run()

    [entry] = await rig.offload.entries(T, S)
    assert entry.task_id == task_a
    assert l2_timer_key(T, S) in rig.runner.timers()
    tasks = {d.task_id: d for d in (await rig.offload.diagrams(T, S)).diagrams}
    task_b = rig.store.get_mark(Scope(T), S, second).task_id
    assert tasks[task_a].status is TaskStatus.ACTIVE
    assert task_b is not None and tasks[task_b].status is TaskStatus.OPEN
    assert rig.store.get_mark(Scope(T), S, third).task_id == task_a


async def test_an_unknown_task_id_is_repaired_once_then_falls_back_offline(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    mark = await rig.offload.user_message(T, S, "Go on", timestamp=rig.clock.now())
    scripted_llm.push_for(
        "offload-l15",
        model.judgment(None, continues="t-invented"),
        model.judgment("Go on"),
    )
    outcome = await run_l15(rig.offload.deps, T, S, mark)
    assert outcome.decision is not None and outcome.decision.new_label == "Go on"
    repair = scripted_llm.calls("offload-l15")[1].messages[-1]["content"]
    assert "t-invented" not in repair and "must be one of the task ids shown" in repair

    mark2 = await rig.offload.user_message(T, S, "More", timestamp=rig.clock.now() + 1)
    bad = model.judgment(None, continues="t-invented")
    scripted_llm.push_for("offload-l15", bad, bad)
    second = await run_l15(rig.offload.deps, T, S, mark2)
    assert second.decision is not None and second.decision.mode is Mode.OFFLINE
    assert second.task_id == outcome.task_id  # the offline rule: the active task goes on
    assert rig.store.get_mark(Scope(T), S, mark2).judged
    [note] = SqlLayerStore(rig.store._store).list_failures(Scope(T))
    assert (note.kind, note.status, note.stage) == (
        FailureKind.FALLBACK, FailureStatus.NOTED, "offload-l15",
    )  # fmt: skip
    assert note.detail == {"mark": mark2} and len(note.raws) == 2 and "t-invented" in note.raws[1]


@pytest.mark.parametrize(
    "reply",
    [
        Reply.truncated('{"completed": false, "continues": null, "new_task": "Fix the ref'),
        Reply.json({"new_task": "add changelog entry", "long_task": False}),
        Reply.text("The refund test in the shop repo is failing. To fix this issue, you need"),
    ],
    ids=["truncated", "missing-fields", "prose"],
)
async def test_an_unusable_judgment_is_never_read(
    rig: Rig, scripted_llm: ScriptedLLM, reply: Reply
) -> None:
    mark = await rig.offload.user_message(T, S, "Fix the refund test", timestamp=rig.clock.now())
    scripted_llm.push_for("offload-l15", reply, reply, reply, reply)
    outcome = await run_l15(rig.offload.deps, T, S, mark)
    assert outcome.decision is not None and outcome.decision.mode is Mode.OFFLINE
    assert outcome.decision.new_label == "Fix the refund test"
    [note] = SqlLayerStore(rig.store._store).list_failures(Scope(T))
    assert note.kind is FailureKind.FALLBACK and note.raws


async def test_a_judgment_endpoint_failure_is_recorded_and_fails_the_task(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    mark = await rig.offload.user_message(T, S, "Fix the refund test", timestamp=rig.clock.now())
    scripted_llm.push_for("offload-l15", Reply.error(500, "model crashed"))
    with pytest.raises(LLMHTTPError):
        await run_l15(rig.offload.deps, T, S, mark)
    assert not rig.store.get_mark(Scope(T), S, mark).judged
    layers = SqlLayerStore(rig.store._store)
    [failure] = layers.list_failures(Scope(T))
    assert (failure.kind, failure.status) == (FailureKind.STAGE, FailureStatus.OPEN)
    assert "model crashed" in failure.raws[0] and failure.detail == {"mark": mark}
    scripted_llm.push_for("offload-l15", model.judgment("Refund test"))
    await run_l15(rig.offload.deps, T, S, mark)  # the pipeline's retry: resolves the record
    assert layers.get_failure(Scope(T), failure.id).status is FailureStatus.RESOLVED


async def test_offline_judgment_opens_then_continues_a_task(offline_rig: Rig) -> None:
    rig = offline_rig
    await rig.offload.user_message(T, S, "Refactor the billing module please", timestamp=1.0)
    await rig.offload.user_message(T, S, "and add tests", timestamp=2.0)
    await rig.run()
    view = await rig.offload.diagrams(T, S)
    [task] = view.diagrams
    assert task.label == "Refactor the billing module please" and task.mermaid == ""
    assert view.note is not None and "need an LLM" in view.note


async def test_the_judgment_sees_the_active_diagram_and_the_others_stages(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    scope, t0 = Scope(T), rig.clock.now()
    first = await rig.offload.user_message(T, S, "Build the export", timestamp=t0)
    scripted_llm.push_for("offload-l15", model.judgment("Export"))
    await rig.run()
    second = await rig.offload.user_message(T, S, "Fix the parser", timestamp=t0 + 1)
    scripted_llm.push_for("offload-l15", model.judgment("Parser"))
    await rig.run()
    task_a = rig.store.get_mark(scope, S, first).task_id
    task_b = rig.store.get_mark(scope, S, second).task_id
    assert task_a is not None and task_b is not None
    for task_id, text in ((task_a, 'flowchart TD\n    q["Query rows"] --> w["Write CSV"]'),
                          (task_b, 'flowchart TD\n    r["Read parser"]')):  # fmt: skip
        rig.store.save_diagram(scope, S, DiagramWrite(task_id, text, 0, {}), t0, None)
    await rig.offload.user_message(T, S, "Back to the export", timestamp=t0 + 2)
    scripted_llm.push_for("offload-l15", model.judgment(None, continues=task_a))
    await rig.run()
    prompt = scripted_llm.calls("offload-l15")[-1].messages[1]["content"]
    assert f"[{task_b}] Parser (active) ACTIVE\nflowchart TD" in prompt
    assert f"[{task_a}] Export (open)\n  stages: Query rows, Write CSV" in prompt
    assert "NEW USER MESSAGE\nBack to the export" in prompt
    assert rig.store.boundary(scope, S).active_task == task_a
