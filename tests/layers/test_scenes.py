"""L2 operations through the scripted server: create, update, merge, delete become validated
scene versions (old versions kept); unknown ids and too many scenes are refused after a repair."""

from __future__ import annotations

import pytest

from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import StageOutputRejected
from stratamem.layers.service import Run
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

SCOPE = Scope("acme")


def create(title: str, *memory_ids: str) -> dict[str, object]:
    return {"op": "create", "title": title, "summary": f"About {title}.",
            "body": f"{title} body.", "memory_ids": list(memory_ids)}  # fmt: skip


async def add_turns(memory: AsyncMemory, session: str, *texts: str) -> None:
    turns = [{"role": "user", "speaker": "Maria", "text": t} for t in texts]
    await memory.capture("acme", session, turns)
    await memory.layer_service().run_l1(Run("acme", f"l1-{session}", session))


async def test_operations_become_versions(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    install_layer_handlers(scripted_llm)
    service = llm_memory.layer_service()
    assert llm_memory.layers is not None
    layers = llm_memory.layers
    await add_turns(llm_memory, "s1", "I work as a nurse.", "I run every morning.")
    scripted_llm.push_for("L2", Reply.json({"operations": [
        create("Work", "M1", "M2"), create("Running", "M2"), create("Mornings", "M2"),
    ]}))  # fmt: skip
    first = await service.run_l2(Run("acme", "l2-1", "s1"))
    assert first.changed and first.counts == {"memories": 2, "scene_versions": 3}
    by_title = {s.title: s for s in layers.current_scenes(SCOPE)}
    assert by_title["Work"].heat == 2.0 and by_title["Work"].memory_ids[0].startswith("m_")

    clock.advance(600)
    await add_turns(llm_memory, "s2", "I ran a half marathon yesterday.")
    scripted_llm.push_for("L2", Reply.json({"operations": [
        {"op": "merge", "scenes": ["S2", "S3"], "title": "Running", "summary": "Runs a lot.",
         "body": "Mornings and races.", "memory_ids": ["M1"]},
        {"op": "delete", "scene": "S1"},
    ]}))  # fmt: skip
    second = await service.run_l2(Run("acme", "l2-2", "s2"))

    assert second.changed
    [running] = layers.current_scenes(SCOPE)
    assert (running.title, running.body, running.version) == ("Running", "Mornings and races.", 2)
    history = layers.scene_history(SCOPE, by_title["Work"].id)
    assert [(s.version, s.deleted) for s in history] == [(1, False), (2, True)]
    shown = scripted_llm.calls("L2")[-1].messages[-1]["content"]
    assert "[S1] Work: About Work." in shown  # by alias, hottest first
    assert by_title["Work"].id not in shown


@pytest.mark.parametrize(
    "bad",
    [
        {"operations": [{"op": "update", "scene": "S9", "body": "x"}]},
        {"operations": [create("A", "M7")]},
        {"operations": [create(f"T{i}") for i in range(13)]},  # more than max_scenes (12)
        {"operations": [{"op": "merge", "scenes": ["S1"], "title": "x"}]},
        {"operations": [{"op": "merge", "scenes": ["S1", "S1"], "title": "x"}]},
    ],
    ids=["unknown-scene", "unknown-memory", "too-many-scenes", "merge-of-one", "merge-itself"],
)
async def test_invalid_operations_are_refused(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM, bad: dict[str, object]
) -> None:
    install_layer_handlers(scripted_llm)
    await add_turns(llm_memory, "s1", "I work as a nurse.")
    scripted_llm.push_for("L2", Reply.json(bad), Reply.json(bad))
    with pytest.raises(StageOutputRejected):
        await llm_memory.layer_service().run_l2(Run("acme", "l2-1", "s1"))
    assert llm_memory.layers is not None
    assert llm_memory.layers.current_scenes(SCOPE) == []
    assert llm_memory.layers.tenant_state(SCOPE).l2_mark == 0  # the changes wait for a re-run


async def test_nothing_changed_since_last_run_is_skipped(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await add_turns(llm_memory, "s1", "I work as a nurse.")
    service = llm_memory.layer_service()
    assert (await service.run_l2(Run("acme", "l2-1", "s1"))).changed
    again = await service.run_l2(Run("acme", "l2-2", "s1"))
    assert again.skipped and len(scripted_llm.calls("L2")) == 1


async def test_a_reply_that_folds_nothing_in_is_refused_after_a_repair(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await add_turns(llm_memory, "s1", "I work as a nurse.")
    scripted_llm.push_for("L2", Reply.json({"operations": []}), Reply.json({"operations": []}))
    with pytest.raises(StageOutputRejected, match="no operation folds in the changed memories"):
        await llm_memory.layer_service().run_l2(Run("acme", "l2-1", "s1"))
    repair = scripted_llm.calls("L2")[1].messages[-1]["content"]
    assert "(M1)" in repair and "update the fitting scenes or create one" in repair
    assert llm_memory.layers is not None
    [failure] = llm_memory.layers.list_failures(SCOPE)
    assert (failure.stage, failure.kind, failure.status) == (
        "L2", FailureKind.STAGE, FailureStatus.OPEN,
    )  # fmt: skip
    assert failure.raws == ('{"operations":[]}', '{"operations":[]}')

    result = await llm_memory.layer_service().run_l2(Run("acme", "l2-2", "s1"))  # handler: ok
    assert result.changed
    assert llm_memory.layers.get_failure(SCOPE, failure.id).status is FailureStatus.RESOLVED


async def test_invalid_operations_are_dropped_and_the_rest_applied(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    await add_turns(llm_memory, "s1", "I work as a nurse.")
    scripted_llm.push_for("L2", Reply.json({"operations": [
        {"op": "create", "scene": None, "scenes": [], "title": "...", "summary": "...",
         "body": "...", "memory_ids": ["M1"]},  # the prompt's example, copied
        {"op": "update", "scene": None},
        create("Work", "M1"),
    ]}))  # fmt: skip
    result = await llm_memory.layer_service().run_l2(Run("acme", "l2-1", "s1"))
    assert result.changed and result.counts["scene_versions"] == 1
    assert llm_memory.layers is not None
    assert [s.title for s in llm_memory.layers.current_scenes(SCOPE)] == ["Work"]
    notes = llm_memory.layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.ITEM))
    assert sorted(n.detail["index"] for n in notes) == [0, 1]
    assert len(scripted_llm.calls("L2")) == 1


async def test_a_reply_of_placeholders_only_is_refused(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """The real model's L2 replies (corpus runE3): the prompt's example, fields left out."""
    install_layer_handlers(scripted_llm)
    await add_turns(llm_memory, "s1", "I work as a nurse.")
    placeholders = Reply.json({"operations": [
        {"op": "create", "scene": None, "scenes": [], "title": "...", "summary": "..."},
        {"op": "update", "scene": None}, {"op": "delete", "scene": None},
    ]})  # fmt: skip
    scripted_llm.push_for("L2", placeholders, placeholders)
    with pytest.raises(StageOutputRejected, match="every operation of the reply was invalid"):
        await llm_memory.layer_service().run_l2(Run("acme", "l2-1", "s1"))
