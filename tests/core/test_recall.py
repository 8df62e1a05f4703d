"""Search filters through the core, and recall rendering within budgets."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Layer
from stratamem.errors import InvalidInput
from stratamem.retrieval.render import render_stable


async def seed(memory: AsyncMemory, clock: ManualClock) -> None:
    await memory.capture("acme", "trip", [{"role": "user", "content": "I booked a train to Porto"}])
    clock.advance(86_400)
    await memory.capture(
        "acme", "work", [{"role": "user", "content": "the train to work was late again"}]
    )


async def test_search_filters_by_session_and_time(
    memory: AsyncMemory, clock: ManualClock
) -> None:
    await seed(memory, clock)
    all_hits = await memory.search("acme", "train")
    assert len(all_hits) == 2
    only_work = await memory.search("acme", "train", sessions=["work"])
    assert [h.session for h in only_work] == ["work"]
    before = await memory.search("acme", "train", until=clock.now() - 1)
    assert [h.session for h in before] == ["trip"]
    assert await memory.search("acme", "train", layers=[Layer.L1]) == []


async def test_search_k_limits_and_validates(memory: AsyncMemory, clock: ManualClock) -> None:
    await seed(memory, clock)
    assert len(await memory.search("acme", "train", k=1)) == 1
    with pytest.raises(InvalidInput):
        await memory.search("acme", "train", k=0)
    with pytest.raises(InvalidInput):
        await memory.search("acme", "   ")


async def test_recall_renders_a_tagged_block_within_budget(
    memory: AsyncMemory, clock: ManualClock
) -> None:
    await seed(memory, clock)
    recall = await memory.recall("acme", "train trips", budget_chars=120)
    assert recall.context.startswith("<stratamem-recall>")
    assert recall.context.endswith("</stratamem-recall>")
    assert len(recall.context) <= 120
    assert recall.stable == ""
    roomy = await memory.recall("acme", "train trips", budget_chars=2000)
    assert "Porto" in roomy.context and "late again" in roomy.context


async def test_recall_with_no_hits_is_empty(memory: AsyncMemory) -> None:
    recall = await memory.recall("acme", "nothing stored yet")
    assert (recall.context, recall.hits) == ("", [])


def test_stable_block_carries_profile_and_scenes_within_budget() -> None:
    block = render_stable("Ann, a nurse in Oslo.", ["Work: night shifts", "Family"], 500)
    assert block.startswith("<stratamem-profile>") and "Work: night shifts" in block
    assert len(render_stable("x" * 1000, [], 200)) <= 200


async def test_recall_with_a_session_leaves_out_its_last_turns(
    tmp_path: Path, clock: ManualClock
) -> None:
    """The agent has its session's last turns in context: recall gives room to the rest (older
    turns of the session, other sessions) and says how many it left out."""
    settings = Settings(data_dir=tmp_path / "data", embedder="none", recall_recent_turns=3)
    memory = AsyncMemory.open(settings, clock=clock)
    try:
        await memory.capture("acme", "old", [{"role": "user", "content": "bees in the garden"}])
        turns = [{"role": "user", "content": f"bees, turn {i}"} for i in range(6)]
        ids = (await memory.capture("acme", "now", turns)).ids
        everything = await memory.recall("acme", "bees", k=10)
        assert set(ids) <= {h.id for h in everything.hits}
        within = await memory.recall("acme", "bees", k=10, session="now")
        kept = {h.id for h in within.hits}
        assert kept.isdisjoint(ids[3:])  # the session's last 3 turns
        assert set(ids[:3]) <= kept and any(h.session == "old" for h in within.hits)
        assert within.stats["left_out_recent_turns"] == 3
        other = await memory.recall("acme", "bees", k=10, session="elsewhere")
        assert {h.id for h in other.hits} == {h.id for h in everything.hits}
    finally:
        await memory.aclose()
