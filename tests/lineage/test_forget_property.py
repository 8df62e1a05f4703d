"""A property over random capture / flush / correct / forget sequences (offline layers,
SQLite): nothing derived ever outlives all its sources, and nothing a forget did not name is
erased while one of its sources remains (unless something was derived again in its place)."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory

TENANT = "prop"
FACTS = ["I live in Lisbon near the river.", "I work as a nurse at night.",
         "I like hiking in the mountains.", "My sister Ines plays the cello.",
         "I prefer green tea in the morning.", "I have two cats at home."]  # fmt: skip
SESSIONS = ["a", "b", "c"]

Op = tuple[str, int, int]
ops = st.lists(st.tuples(
    st.sampled_from(["capture", "capture", "flush", "correct", "erase_session", "erase_turn",
                     "erase_memory"]),
    st.integers(0, 10), st.integers(0, 10),
), min_size=3, max_size=14)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops)
def test_nothing_derived_outlives_its_sources_and_nothing_kept_alive_is_erased(
    steps: list[Op],
) -> None:
    with tempfile.TemporaryDirectory() as root:
        asyncio.run(_run(Path(root), steps))


async def _run(root: Path, steps: list[Op]) -> None:
    settings_ = Settings(data_dir=root, embedder="hash:32", background_embedding=False)
    memory = AsyncMemory.open(settings_, clock=ManualClock(1_715_166_000.0), llm=None)
    try:
        for index, (kind, a, b) in enumerate(steps):
            memory.clock.advance(10)  # type: ignore[attr-defined]
            await _step(memory, index, kind, a, b)
            await _check(memory)
    finally:
        await memory.aclose()


async def _step(memory: AsyncMemory, index: int, kind: str, a: int, b: int) -> None:
    session = SESSIONS[a % len(SESSIONS)]
    if kind == "capture":
        text = f"{FACTS[b % len(FACTS)]} Note {index} here."
        await memory.capture(TENANT, session, [{"role": "user", "content": text}])
        return
    if kind == "flush":
        await memory.flush(TENANT, session)
        return
    memories = await memory.list_memories(TENANT, limit=200)
    if kind == "correct" and memories:
        target = memories[b % len(memories)]
        await memory.update_memory(TENANT, target.id, content=f"{target.content} (corrected)")
        return
    if kind == "erase_memory" and memories:
        await memory.erase_memory(TENANT, memories[b % len(memories)].id)
        return
    before = await _rows(memory)
    if kind == "erase_session":
        await memory.erase_session(TENANT, session)
    elif kind == "erase_turn":
        turns = await _turn_ids(memory)
        if not turns:
            return
        await memory.erase_turn(TENANT, turns[b % len(turns)])
    else:
        return
    after = await _rows(memory)
    turns_left = set(await _turn_ids(memory))
    rederived_from = {json.loads(r[2]).get("rederived_from") for r in after.values()}
    for memory_id, (sources, _, _) in before.items():
        if memory_id in after or not json.loads(sources):
            continue
        kept_sources = set(json.loads(sources)) & turns_left
        assert not kept_sources or memory_id in rederived_from, (memory_id, kept_sources)


async def _rows(memory: AsyncMemory) -> dict[str, tuple[str, str | None, str]]:
    with memory.store.reading() as conn:  # type: ignore[attr-defined]
        rows = conn.execute(
            "SELECT id, source_turn_ids, superseded_by, metadata FROM memories WHERE tenant = ?",
            (TENANT,),
        ).fetchall()
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


async def _turn_ids(memory: AsyncMemory) -> list[str]:
    with memory.store.reading() as conn:  # type: ignore[attr-defined]
        rows = conn.execute("SELECT id FROM turns WHERE tenant = ? ORDER BY rid",
                            (TENANT,)).fetchall()  # fmt: skip
    return [r[0] for r in rows]


async def _check(memory: AsyncMemory) -> None:
    """Every memory with sources keeps one; every scene and profile version's memories exist."""
    turns = set(await _turn_ids(memory))
    rows = await _rows(memory)
    for memory_id, (sources, _, _) in rows.items():
        listed = json.loads(sources)
        assert not listed or set(listed) & turns, (memory_id, listed)
    with memory.store.reading() as conn:  # type: ignore[attr-defined]
        built = conn.execute(
            "SELECT kind, id, version, source_id FROM lineage WHERE tenant = ?"
            " AND source_kind = 'memory'", (TENANT,),
        ).fetchall()  # fmt: skip
        scenes = conn.execute("SELECT id, version, memory_ids FROM scene_versions"
                              " WHERE tenant = ?", (TENANT,)).fetchall()  # fmt: skip
    for kind, id_, version, source in built:
        assert source in rows, (kind, id_, version, source)
    for scene_id, version, memory_ids in scenes:
        assert set(json.loads(memory_ids)) <= set(rows), (scene_id, version)
