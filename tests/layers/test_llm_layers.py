"""The layers through the scripted OpenAI-compatible server (real HTTP): the happy path, updates
with history and `as_of`, and a repair round that fixes an unknown id."""

from __future__ import annotations

import json

import pytest

from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import MemoryType, Mode, Scope
from stratamem.errors import StageOutputRejected
from stratamem.layers.service import Run
from stratamem.layers.settings import LayerSettings
from stratamem.store.evidence.receipts import Attempt
from stratamem.store.failures.records import FailureKind, FailureQuery
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

from .conftest import START

TURNS = [
    {"role": "user", "speaker": "Maria", "text": "I'm a nurse and I live in Lisbon."},
    {"role": "assistant", "text": "Nice to meet you, Maria."},
    {"role": "user", "speaker": "Maria", "text": "I ran a half marathon yesterday."},
]
SCOPE = Scope("acme")


async def test_happy_path_end_to_end(llm_memory: AsyncMemory, scripted_llm: ScriptedLLM) -> None:
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS)
    result = await llm_memory.flush("acme", "s1")

    assert [r.changed for r in result.l1] == [True, False] and result.l1[-1].skipped
    assert result.l2 is not None and result.l2.changed
    assert result.l3 is not None and result.l3.changed
    memories = llm_memory.store.list_memories(SCOPE)
    assert sorted(m.content for m in memories) == [
        "Maria: I ran a half marathon yesterday.",
        "Maria: I'm a nurse and I live in Lisbon.",
    ]
    assert {m.mode for m in memories} == {Mode.LLM}
    assert {m.metadata["made_by"] for m in memories} == {"l1_extract@v1"}
    turns = llm_memory.store.list_turns(SCOPE, "s1")
    race = next(m for m in memories if m.type is MemoryType.EPISODIC)
    assert race.source_turn_ids == (turns[2].id,)
    assert race.activity_start == START - START % 86400  # the turn's day, resolved by the model
    state = llm_memory.layers.session_state(SCOPE, "s1") if llm_memory.layers else None
    assert state is not None and state.cursor_seq == 3

    recall = await llm_memory.recall("acme", "marathon", include_turns=False)
    assert "half marathon" in recall.context
    assert "The user talks about: Life." in recall.stable
    assert "- Life: What the user shares." in recall.stable
    usage = scripted_llm.usage()
    assert {stage: usage[stage]["calls"] for stage in ("L1", "L2", "L3")} == {
        "L1": 1, "L2": 1, "L3": 1,
    }  # fmt: skip
    assert "L1-reconcile" not in usage  # nothing to reconcile against in an empty store


async def test_reconcile_asks_only_about_memories_with_a_near_neighbour(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """A new memory whose nearest existing one is not similar enough is stored without a call;
    one with a near neighbour is shown to the model alone."""
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS[:1])
    await llm_memory.flush("acme", "s1")
    unrelated = {"role": "user", "speaker": "Maria", "text": "We adopted a cat called Miso."}
    await llm_memory.capture("acme", "s2", [unrelated])
    await llm_memory.flush("acme", "s2")
    assert scripted_llm.calls("L1-reconcile") == []
    assert len(llm_memory.store.list_memories(SCOPE)) == 2

    again = {"role": "user", "speaker": "Maria", "text": "I'm a nurse and I live in Lisbon!"}
    await llm_memory.capture("acme", "s3", [again, unrelated | {"text": "I bake bread daily."}])
    await llm_memory.flush("acme", "s3")
    [call] = scripted_llm.calls("L1-reconcile")
    shown = call.messages[-1]["content"]
    assert "nurse" in shown and "bread" not in shown and "[N2]" not in shown
    assert len(llm_memory.store.list_memories(SCOPE)) == 4


async def test_a_restatement_sees_the_memory_it_restates_among_its_neighbours(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """The neighbours are the nearest by vector above the threshold, not the fused top k: a
    memory sharing only the name and filler words, found by all three retrievers, outranked
    the restated one (0.9 and more) found by two, and the restatement was stored as novel."""
    install_layer_handlers(scripted_llm)
    facts = ["I'm a nurse at the children's hospital", "I'm allergic to peanuts",
             "I visited Porto last Friday", "I started learning the cello last month",
             "I switched to night shifts last week", "I ran a half marathon yesterday"]
    said = [{"role": "user", "speaker": "Maria", "text": f"{fact}. By the way, round {n}."}
            for n, fact in enumerate(facts, start=1)]  # fmt: skip
    await llm_memory.capture("acme", "s1", said)
    await llm_memory.flush("acme", "s1")
    again = said[0] | {"text": f"{facts[0]}. By the way, round 13."}
    await llm_memory.capture("acme", "s2", [again])
    await llm_memory.flush("acme", "s2")
    [call] = scripted_llm.calls("L1-reconcile")
    shown = call.messages[-1]["content"]
    assert "EXISTING [E1] (persona, undated) Maria: I'm a nurse at the children's hospital." \
        " By the way, round 1." in shown


async def test_a_memory_stored_beside_one_with_all_its_words_is_a_restatement(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """Numbers aside ("round 13" beside "round 1"): L2's count of any kind leaves it out; a
    near memory with a word of its own is not novel, but no restatement either."""
    install_layer_handlers(scripted_llm)
    fact = "I'm a nurse at the children's hospital"
    said = {"role": "user", "speaker": "Maria", "text": f"{fact}. By the way, round 1."}
    await llm_memory.capture("acme", "s1", [said])
    await llm_memory.flush("acme", "s1")
    again = said | {"text": f"{fact}. By the way, round 13."}
    more = said | {"text": f"{fact}, in Porto. By the way, round 14."}
    await llm_memory.capture("acme", "s2", [again, more])
    await llm_memory.flush("acme", "s2")
    marks = {m.content.rsplit(" ", 1)[-1]: (m.metadata.get("novel"), m.metadata.get("restates"))
             for m in llm_memory.store.list_memories(SCOPE)}  # fmt: skip
    assert marks == {"1.": (None, None), "13.": (False, True), "14.": (False, None)}


async def test_an_exact_repeat_is_skipped_without_asking_the_model(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """Its only possible answer is skip: the offline rule says it, and the turn's ledger names
    the memory it repeats; a new memory beside it is still asked about."""
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS[:1])
    await llm_memory.flush("acme", "s1")
    [first] = llm_memory.store.list_memories(SCOPE)
    await llm_memory.capture("acme", "s2", TURNS[:1])
    await llm_memory.flush("acme", "s2")
    assert scripted_llm.calls("L1-reconcile") == []
    assert [m.id for m in llm_memory.store.list_memories(SCOPE)] == [first.id]
    assert llm_memory.layers is not None
    [turn] = llm_memory.store.list_turns(SCOPE, "s2")
    ledger = llm_memory.layers.turn_outcomes(SCOPE, "s2", [turn.id])
    assert ledger[turn.id].memory_ids == (first.id,)

    near = TURNS[0] | {"text": "I'm a nurse and I live in Lisbon!"}
    await llm_memory.capture("acme", "s3", [TURNS[0], near])
    await llm_memory.flush("acme", "s3")
    [call] = scripted_llm.calls("L1-reconcile")
    assert "[N1]" in call.messages[-1]["content"] and "[N2]" not in call.messages[-1]["content"]


async def test_update_keeps_the_old_version_for_history_and_as_of(
    llm_memory: AsyncMemory,
    scripted_llm: ScriptedLLM,
    clock: ManualClock,
    layer_settings: LayerSettings,
) -> None:
    # the hash embedder sees "moved to Porto" far from "live in Lisbon" (0.37): ask anyway
    layer_settings.reconcile_min_similarity = -1.0
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS[:1])
    await llm_memory.flush("acme", "s1")
    before_move = clock.now()
    clock.advance(86400)
    old = llm_memory.store.list_memories(SCOPE)[0]

    scripted_llm.push_for(
        "L1-reconcile",
        Reply.json({"decisions": [{"memory": "N1", "action": "update", "targets": ["E1"],
                                   "content": "Maria is a nurse and lives in Porto."}]}),
    )  # fmt: skip
    moved = {"role": "user", "speaker": "Maria", "text": "I moved to Porto, still a nurse."}
    await llm_memory.capture("acme", "s2", [moved])
    result = await llm_memory.flush("acme", "s2")

    assert result.l1[0].counts["update"] == 1
    current = llm_memory.store.list_memories(SCOPE)
    assert [m.content for m in current] == ["Maria is a nurse and lives in Porto."]
    assert llm_memory.layers is not None
    history = llm_memory.layers.memory_history(SCOPE, current[0].id)
    assert [m.id for m in history] == [old.id, current[0].id]
    assert history[0].valid_to == clock.now() and history[0].superseded_by == current[0].id
    assert set(current[0].source_turn_ids) > set(old.source_turn_ids)

    then = await llm_memory.search("acme", "nurse", layers=["L1"], as_of=before_move)
    now = await llm_memory.search("acme", "nurse", layers=["L1"])
    assert [h.text for h in then] == ["Maria: I'm a nurse and I live in Lisbon."]
    assert [h.text for h in now] == ["Maria is a nurse and lives in Porto."]
    shown = scripted_llm.calls("L1-reconcile")[0].messages[-1]["content"]
    assert "EXISTING [E1]" in shown and old.id not in shown  # aliases, not ids


async def test_an_unknown_id_is_repaired_once(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    bad = {"memories": [{"type": "persona", "content": "Maria is a nurse.",
                         "source_turn_ids": ["T9"]}]}  # fmt: skip
    scripted_llm.push_for("L1", Reply.json(bad))
    await llm_memory.capture("acme", "s1", TURNS[:1])
    service = llm_memory.layer_service()
    result = await service.run_l1(Run("acme", "task-1", "s1"))

    assert result.changed
    calls = scripted_llm.calls("L1")
    assert len(calls) == 2
    repair = calls[1].messages[-1]["content"]
    assert "T9" in repair and "were not shown" in repair
    assert json.loads(calls[1].messages[-2]["content"]) == bad


async def test_an_l3_with_nothing_new_is_skipped_without_an_llm_call(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    """Each L1 past the count and each L2 cascade may queue an L3 for the same change."""
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS)
    await llm_memory.flush("acme", "s1")
    assert scripted_llm.usage()["L3"]["calls"] == 1
    service = llm_memory.layer_service()
    clock.advance(60)
    again = await service.run_l3(Run("acme", "l3-duplicate", None, None))
    assert again.skipped and not again.changed
    assert scripted_llm.usage()["L3"]["calls"] == 1
    clock.advance(60)
    await llm_memory.capture("acme", "s2", [{"role": "user", "speaker": "Maria",
                                              "text": "I adopted a cat named Tom."}])  # fmt: skip
    await llm_memory.flush("acme", "s2")  # new memories and scenes: the profile is written again
    assert scripted_llm.usage()["L3"]["calls"] == 2


async def test_l3_does_not_run_without_scenes(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """A profile written from no scenes is one the model invents (corpus runE2): no call."""
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS)
    service = llm_memory.layer_service()
    await service.run_l1(Run("acme", "l1", "s1"))
    result = await service.run_l3(Run("acme", "l3", None))
    assert result.skipped and result.counts == {"scenes": 0}
    assert "L3" not in scripted_llm.usage()
    assert llm_memory.layers is not None
    assert llm_memory.layers.profile(SCOPE) is None
    assert llm_memory.layers.tenant_state(SCOPE).memories_since_l3 == 0  # not asked again
    again = await service.run_l3(Run("acme", "l3-again", None))
    assert again.skipped and "L3" not in scripted_llm.usage()


async def test_a_one_word_profile_is_refused_and_a_flush_builds_it_offline(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """A flush's stages are not retried: a profile still unusable after its repair round is
    written by the offline builder, and the fallback is on record with the replies."""
    install_layer_handlers(scripted_llm)
    await llm_memory.capture("acme", "s1", TURNS)
    scripted_llm.push_for("L3", Reply.json({"profile": "Paris!"}), Reply.json({"profile": ""}))
    result = await llm_memory.flush("acme", "s1")
    assert result.l3 is not None and result.l3.counts["offline_fallback"] == 1
    assert llm_memory.layers is not None
    profile = llm_memory.layers.profile(SCOPE)
    assert profile is not None and profile.mode is Mode.OFFLINE and "nurse" in profile.body
    (record,) = llm_memory.layers.list_failures(SCOPE, FailureQuery(stage="L3"))
    assert record.kind is FailureKind.FALLBACK and "says too little" in record.error
    assert record.raws == ('{"profile":"Paris!"}', '{"profile":""}')


async def test_l2_falls_back_to_offline_scenes_on_the_last_attempt_of_its_task(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """A model that cannot do L2 (an empty list of operations, after the repair round too):
    each attempt of the task but the last fails and is retried; the last builds offline."""
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L2", lambda request: Reply.json({"operations": []}))
    await llm_memory.capture("acme", "s1", TURNS)
    service = llm_memory.layer_service()
    await service.run_l1(Run("acme", "l1", "s1"))
    with pytest.raises(StageOutputRejected, match="no operation folds in"):
        await service.run_l2(Run("acme", "l2", "s1", attempt=_attempt("l2", 0)))
    result = await service.run_l2(Run("acme", "l2", "s1", attempt=_attempt("l2", 2)))
    assert result.changed and result.counts["offline_fallback"] == 1
    assert llm_memory.layers is not None
    scenes = llm_memory.layers.current_scenes(SCOPE)
    assert scenes and {s.mode for s in scenes} == {Mode.OFFLINE}
    records = llm_memory.layers.list_failures(SCOPE, FailureQuery(stage="L2"))
    assert sorted(r.kind.value for r in records) == ["fallback", "stage"]
    assert {r.status.value for r in records if r.kind is FailureKind.STAGE} == {"resolved"}


def _attempt(task_id: str, attempt: int) -> Attempt:
    return Attempt(task_id, attempt, attempt + 1, None, "w1", START)
