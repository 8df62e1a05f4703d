"""The offline mode end to end, with no LLM endpoint: capture → L1 → L2 → L3 → recall."""

from __future__ import annotations

from stratamem.clock import ManualClock
from stratamem.core import AsyncMemory
from stratamem.domain import MemoryType, Mode, Scope
from stratamem.layers import offline
from stratamem.layers.offline_dates import resolve_relative_date
from stratamem.layers.views import day

from .conftest import START

CONVERSATION = [
    {"role": "user", "speaker": "Maria", "text": "Hi! I'm a nurse and I live in Lisbon."},
    {"role": "assistant", "text": "Nice to meet you, Maria. How was your week?"},
    {"role": "user", "speaker": "Maria", "text": "I ran a half marathon yesterday. Tired now."},
    {"role": "user", "speaker": "Maria", "text": "Please always answer me in short bullet points."},
    {"role": "user", "speaker": "Maria", "text": "What should I eat after a race?"},
]


async def test_offline_end_to_end(offline_memory: AsyncMemory) -> None:
    await offline_memory.capture("acme", "s1", CONVERSATION)
    result = await offline_memory.flush("acme", "s1")

    assert result.l1[0].mode is Mode.OFFLINE and result.l1[0].changed
    assert result.l1[-1].skipped  # caught up
    assert result.l2 is not None and result.l2.changed
    assert result.l3 is not None and result.l3.changed
    memories = offline_memory.store.list_memories(Scope("acme"))
    by_type = {m.type: m for m in memories}
    assert {m.mode for m in memories} == {Mode.OFFLINE}
    assert "Maria: I'm a nurse and I live in Lisbon." in [m.content for m in memories]
    race = next(m for m in memories if "marathon" in m.content)
    assert race.type is MemoryType.EPISODIC
    assert "(on 2024-05-07)" in race.content and day(race.activity_start) == "2024-05-07"
    assert MemoryType.INSTRUCTION in by_type
    assert not any("eat after a race" in m.content for m in memories)  # questions are dropped

    recall = await offline_memory.recall("acme", "marathon race", include_turns=False)
    assert "half marathon" in recall.context
    assert "User profile:" in recall.stable and "bullet points" in recall.stable
    assert "Scenes:" in recall.stable and "What happened" in recall.stable


async def test_offline_rerun_after_more_turns_skips_what_it_has(
    offline_memory: AsyncMemory, clock: ManualClock
) -> None:
    await offline_memory.capture("acme", "s1", CONVERSATION[:1])
    await offline_memory.flush("acme", "s1")
    clock.advance(3600)
    await offline_memory.capture("acme", "s2", [{**CONVERSATION[0], "timestamp": START + 99}])
    second = await offline_memory.flush("acme", "s2")

    assert second.l1[0].counts["skip"] == 1
    contents = [m.content for m in offline_memory.store.list_memories(Scope("acme"))]
    assert contents.count("Maria: I'm a nurse and I live in Lisbon.") == 1


def test_relative_dates_resolve_against_the_turn_time() -> None:
    wednesday = START  # 2024-05-08
    cases = {
        "I went there yesterday": "2024-05-07",
        "we met two days ago": "2024-05-06",
        "it was 3 weeks ago": "2024-04-17",
        "I moved last week": "2024-05-01",
        "I saw her last Friday": "2024-05-03",
        "on Wednesday I swam": "2024-05-01",
        "tomorrow I fly": "2024-05-09",
        "I changed jobs last year": "2023-05-09",
        "the appointment is next Monday": "2024-05-13",
        "we fly next week": "2024-05-15",
    }
    for sentence, expected in cases.items():
        assert day(resolve_relative_date(sentence, wednesday)) == expected, sentence
    assert resolve_relative_date("I like tea", wednesday) is None


def test_statements_and_types() -> None:
    text = "Hello! I love green tea. Do you? Never call me before noon. We hiked Sintra."
    assert offline.split_statements(text) == [
        "I love green tea.",
        "Never call me before noon.",
        "We hiked Sintra.",
    ]
    kinds = [offline.classify(s) for s in offline.split_statements(text)]
    assert kinds == [MemoryType.PERSONA, MemoryType.INSTRUCTION, MemoryType.EPISODIC]
    assert offline.classify("And always give me metric units.") is MemoryType.INSTRUCTION
    assert offline.classify("Keep it short though.") is MemoryType.INSTRUCTION


async def test_a_statement_repeated_in_a_batch_is_stored_once(offline_memory: AsyncMemory) -> None:
    text = "I love green tea. I love green tea."
    await offline_memory.capture("acme", "s1", [{"role": "user", "text": text}])
    result = await offline_memory.flush("acme", "s1")
    assert result.l1[0].counts["store"] == 1
