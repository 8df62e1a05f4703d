"""Grounded memories through the scripted OpenAI-compatible server (real HTTP): of an L1 reply
that mixes faithful memories with the prompt's own example pinned on an assistant's turn, a
JSON fragment and a fact no turn states, the faithful ones are stored and the three others are
refused, each a `refused` record with the raw item and the reason."""

from __future__ import annotations

import json

from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import MemoryType, Scope
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus
from stratamem.testing import Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers

from .conftest import START

SCOPE = Scope("acme")
DAY = 86_400.0
TURNS = [
    {"role": "user", "speaker": "Priya", "text": "Hi, I'm Priya. I work night shifts as a nurse."},
    {"role": "assistant", "text": "Noted. Shellfish allergies can be serious, avoid the prawns."},
    {"role": "user", "speaker": "Priya", "text": "My sister Maria is vegetarian, so we cook"
     " lentils when she visits."},
    {"role": "user", "speaker": "Priya", "text": "Our cat Biscuit sees the vet tomorrow."},
    {"role": "user", "speaker": "Priya", "text": "What should I cook tonight?"},
]  # fmt: skip
FAITHFUL = [
    {"type": "persona", "content": "Priya works night shifts as a nurse.", "priority": 60,
     "source_turn_ids": ["T1"], "activity_date": None},
    {"type": "persona", "content": "Priya's sister Maria is vegetarian.", "priority": 50,
     "source_turn_ids": ["T3"], "activity_date": None},
    {"type": "episodic", "content": "Priya's cat Biscuit has a vet appointment.", "priority": 40,
     "source_turn_ids": ["T4"], "activity_date": "2024-05-09"},
]  # fmt: skip
UNSUPPORTED = [
    {"type": "persona", "content": "Maria is vegetarian.", "priority": 50,
     "source_turn_ids": ["T2"], "activity_date": None},
    {"type": "persona", "content": 'B1234567890:T1, priority=50}, {"', "priority": 50,
     "source_turn_ids": ["T1"], "activity_date": None},
    {"type": "persona", "content": "Priya is training for the Berlin marathon.", "priority": 50,
     "source_turn_ids": ["T5"], "activity_date": None},
]  # fmt: skip


async def test_faithful_memories_are_stored_and_unsupported_ones_refused_on_record(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    install_layer_handlers(scripted_llm)
    scripted_llm.push_for("L1", Reply.json({"memories": [*FAITHFUL, *UNSUPPORTED]}))
    await llm_memory.capture("acme", "s1", TURNS)
    clock.advance(3600)  # extracted an hour after it was said
    result = await llm_memory.flush("acme", "s1")

    assert result.l1[0].counts["refused_items"] == 3
    memories = {m.content: m for m in llm_memory.store.list_memories(SCOPE)}
    assert sorted(memories) == sorted(m["content"] for m in FAITHFUL)
    vet = memories["Priya's cat Biscuit has a vet appointment."]
    assert vet.type is MemoryType.EPISODIC
    assert vet.activity_start == START - START % DAY + DAY  # "tomorrow", resolved by the model
    assert llm_memory.layers is not None
    refused = llm_memory.layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.REFUSED))
    assert {f.status for f in refused} == {FailureStatus.NOTED}
    by_content = {json.loads(f.raws[0])["content"]: f for f in refused}
    assert sorted(by_content) == sorted(m["content"] for m in UNSUPPORTED)
    turns = llm_memory.store.list_turns(SCOPE, "s1")
    nurse = memories["Priya works night shifts as a nurse."]
    assert nurse.valid_from == turns[0].timestamp == START  # valid since said, not extracted
    example = by_content["Maria is vegetarian."]
    assert "cites only assistant turns" in example.error
    assert example.turn_ids == (turns[1].id,)
    assert "markup or JSON" in by_content[UNSUPPORTED[1]["content"]].error
    marathon = by_content["Priya is training for the Berlin marathon."]
    assert "not supported by the cited turns" in marathon.error
    assert marathon.turn_ids == (turns[4].id,)
    assert json.loads(marathon.raws[0])["source_turn_ids"] == ["T5"]


async def test_an_events_time_comes_from_its_turns(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """A date no cited turn gives reason for (the turn names no time) is the turn's own."""
    install_layer_handlers(scripted_llm)
    event = {"type": "episodic", "content": "Priya cooked lentils for her sister Maria.",
             "priority": 40, "source_turn_ids": ["T1"], "activity_date": "2024-05-09"}
    scripted_llm.push_for("L1", Reply.json({"memories": [event]}))
    said = {"role": "user", "speaker": "Priya", "text": "I cooked lentils for my sister Maria."}
    await llm_memory.capture("acme", "s1", [said])
    await llm_memory.flush("acme", "s1")

    (memory,) = llm_memory.store.list_memories(SCOPE)
    (turn,) = llm_memory.store.list_turns(SCOPE, "s1")
    assert memory.activity_start == turn.timestamp


async def test_an_assistants_turn_the_user_confirmed_grounds_a_fact(
    llm_memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    install_layer_handlers(scripted_llm)
    fact = {"type": "persona", "content": "Priya is allergic to shellfish.", "priority": 80,
            "source_turn_ids": ["T1"], "activity_date": None}
    scripted_llm.push_for("L1", Reply.json({"memories": [fact]}))
    await llm_memory.capture("acme", "s1", [
        {"role": "assistant", "text": "So you are allergic to shellfish?"},
        {"role": "user", "speaker": "Priya", "text": "Yes, badly."},
    ])  # fmt: skip
    await llm_memory.flush("acme", "s1")

    assert [m.content for m in llm_memory.store.list_memories(SCOPE)] == [fact["content"]]
