"""What a forget builds again, offline and in its own transaction (`store/lineage/store.py`):
the memories drawn partly from what was forgotten, derived again from the turns left by the
offline extractor; each scene whose current version was built from a forgotten memory, an
extractive version of the memories it has left (a retired version when none is left); the
profile, when its current version was, from the persona and instruction memories left.

With an LLM configured, what is built here is offline (`Mode.OFFLINE`); the next L2 folds the
memories derived again into the scenes, and the next L3 writes the profile with the model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from stratamem.domain import MemoryRecord, Mode, Profile, Scene, Turn
from stratamem.layers import offline
from stratamem.layers.model import stable_id
from stratamem.layers.settings import LayerSettings
from stratamem.store.lineage.port import Affected, Rebuilder, Rebuilt, SceneRebuild
from stratamem.store.lineage.rows import MEMORY, Ref


def rebuilder(settings: LayerSettings) -> Rebuilder:
    """The rebuilder of a forget under `settings` (the layers' bounds)."""
    return lambda affected: rebuild(affected, settings)


def rebuild(affected: Affected, settings: LayerSettings) -> Rebuilt:
    replacements = {
        old.id: _rederived(old, turns, affected.now, settings) for old, turns in affected.rederive
    }
    scenes = [_scene(r, affected.now, settings.max_scene_chars) for r in affected.scenes]
    profile, sources = None, []
    if affected.profile_version is not None:
        body = offline.profile_body(affected.profile_memories, settings.max_profile_chars)
        if body:
            profile = Profile(affected.tenant, body, affected.profile_version, affected.now,
                              Mode.OFFLINE)  # fmt: skip
            sources = [Ref(MEMORY, m.id) for m in affected.profile_memories]
    return Rebuilt(replacements, scenes, profile, sources)


def _rederived(
    old: MemoryRecord, turns: Sequence[Turn], now: float, settings: LayerSettings
) -> list[MemoryRecord]:
    out = []
    for index, new in enumerate(offline.extract(turns, settings.max_memories_per_batch)):
        out.append(MemoryRecord(
            id=stable_id("m", old.tenant, "rederived", old.id, index), tenant=old.tenant,
            type=new.type, content=new.content, priority=new.priority,
            source_turn_ids=new.source_turn_ids, session=old.session,
            activity_start=new.activity_start, valid_from=now, created_at=now, updated_at=now,
            mode=Mode.OFFLINE, metadata={"rederived_from": old.id},
        ))  # fmt: skip
    return out


def _scene(rebuild_: SceneRebuild, now: float, max_chars: int) -> Scene:
    return extractive_scene(rebuild_.current, rebuild_.memories, rebuild_.title,
                            rebuild_.version, now, max_chars)  # fmt: skip


def extractive_scene(
    current: Scene,
    memories: Sequence[MemoryRecord],
    title: str,
    version: int,
    now: float,
    max_chars: int,
) -> Scene:
    """A new version of `current` listing `memories` (the newest that fit), or a retired one
    when there are none: what a forget or a correction writes without a model."""
    base = replace(current, version=version, title=title, updated_at=now, mode=Mode.OFFLINE)
    if not memories:
        return replace(base, summary="", body="", memory_ids=(), deleted=True)
    body = offline.scene_body("", memories, max_chars)
    lines = body.splitlines()
    kept = [m for m in memories if f"- {m.content}" in lines]
    latest = lines[-1][2:] if lines else ""
    latest = latest if len(latest) <= 120 else latest[:119] + "…"
    summary = f"{len(lines)} memories; latest: {latest}"
    return replace(base, summary=summary, body=body, memory_ids=tuple(m.id for m in kept),
                   deleted=False)  # fmt: skip
