"""Search filters through the core, and recall rendering within budgets."""

from __future__ import annotations

import pytest

from stratamem.clock import ManualClock
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
