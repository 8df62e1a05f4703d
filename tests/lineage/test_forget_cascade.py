"""Forgetting reaches everything built on what was forgotten (issue 25's scenario, offline
layers, on both stores): after a session's erase no memory, scene, profile, history version,
failure record, search or recall shows its words; the other session's facts stay; a SQLite
file holds neither word once closed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.store.failures.records import Failure, FailureKind
from tests.stores import store_url

TENANT = "acme"
WORDS = ("zanzibar", "quilla")
S1 = [
    {"role": "user", "content": "I love Zanzibar, I spent my honeymoon there with my wife."},
    {"role": "assistant", "content": "That sounds lovely."},
    {"role": "user", "content": "My wife Quilla is a marine biologist."},
]
S2 = [
    {"role": "user", "content": "I work as a carpenter in Porto."},
    {"role": "user", "content": "I prefer tea over coffee in the morning."},
]


@pytest.fixture
async def memory(
    request: pytest.FixtureRequest, store_kind: str, tmp_path: Path
) -> AsyncIterator[AsyncMemory]:
    url = store_url(request, store_kind, tmp_path)
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64",
                        background_embedding=False, store_url=None if store_kind == "sqlite"
                        else url)  # fmt: skip
    opened = AsyncMemory.open(settings, clock=ManualClock(1_715_166_000.0), llm=None)
    yield opened
    await opened.aclose()


async def _filled(memory: AsyncMemory) -> None:
    await memory.capture(TENANT, "s1", S1)
    await memory.flush(TENANT, "s1")
    memory.clock.advance(60)  # type: ignore[attr-defined]
    await memory.capture(TENANT, "s2", S2)
    await memory.flush(TENANT, "s2")
    await memory.embed_pending()


async def _everything_shown(memory: AsyncMemory, turns: bool = True) -> str:
    """Every text a tenant can read back: memories (every version), scenes and their
    histories, the profile and its history, failure records, search and recall (of the
    conversations too, with `turns`)."""
    texts: list[str] = []
    for found in await memory.list_memories(TENANT, limit=500, as_of=None):
        for version in await memory.memory_history(TENANT, found.id):
            texts.append(version.content)
    for scene in await memory.scenes(TENANT):
        texts += [f"{v.title} {v.summary} {v.body}" for v in
                  await memory.scene_history(TENANT, scene.id)]  # fmt: skip
    texts += [p.body for p in await memory.profile_history(TENANT)]
    layers = memory._layer_store()
    texts += [f"{f.error} {f.raws}" for f in layers.list_failures(Scope(TENANT))]
    for word in WORDS:
        layers_ = ("L1", "L0") if turns else ("L1",)
        found = await memory.search(TENANT, f"{word} honeymoon wife", layers=layers_)
        texts += [h.text for h in found]
        recall = await memory.recall(TENANT, f"where was my {word} honeymoon?", include_turns=turns)
        texts += [recall.context, recall.stable]
    return "\n".join(texts).lower()


async def test_erasing_a_session_rebuilds_what_was_built_on_it(memory: AsyncMemory) -> None:
    await _filled(memory)
    before = await _everything_shown(memory)
    assert all(word in before for word in WORDS)  # the scenario holds: the words were there
    failure = Failure(
        id="f_zanzibar",
        tenant=TENANT,
        kind=FailureKind.STAGE,
        stage="L2",
        session=None,
        task_id="t",
        error="bad reply",
        raws=("scene: honeymoon in Zanzibar",),
        failed_at=memory.clock.now(),
    )
    memory._layer_store().record_failures([failure])

    erased = await memory.erase_session(TENANT, "s1")

    assert erased["turns"] == 3 and erased["memories"] == 2
    assert erased["purged_versions"] >= 3 and erased["rebuilt"] >= 2  # scenes, profile
    after = await _everything_shown(memory)
    assert not [w for w in WORDS if w in after], after
    assert "carpenter in porto" in after and "tea over coffee" in after
    profile = await memory.profile(TENANT)
    assert profile is not None and "carpenter" in profile.body.lower()


async def test_the_sqlite_file_keeps_no_copy_once_closed(tmp_path: Path) -> None:
    settings = Settings(data_dir=tmp_path / "data", embedder="hash:64",
                        background_embedding=False)  # fmt: skip
    memory = AsyncMemory.open(settings, clock=ManualClock(1_715_166_000.0), llm=None)
    await _filled(memory)
    await memory.erase_session(TENANT, "s1")
    await memory.aclose()
    raw = b"".join(p.read_bytes() for p in (tmp_path / "data").iterdir() if p.is_file())
    assert b"Porto" in raw
    for word in WORDS:
        assert word.encode() not in raw.lower(), word


async def test_forgetting_one_memory_purges_its_history_and_what_was_built_on_it(
    memory: AsyncMemory,
) -> None:
    await _filled(memory)
    quilla = next(m for m in await memory.list_memories(TENANT) if "Quilla" in m.content)
    corrected = await memory.update_memory(
        TENANT, quilla.id, content="User: My wife Quilla is an oceanographer."
    )
    await memory.flush(TENANT, "s2")

    erased = await memory.erase_memory(TENANT, corrected.id)

    assert erased["memories"] == 2 and erased["turns"] == 0
    after = await _everything_shown(memory, turns=False)  # its turn stays: erase_turn for that
    assert "quilla" not in after and "oceanographer" not in after
    assert "zanzibar" in after  # the other memory of the same session stays
