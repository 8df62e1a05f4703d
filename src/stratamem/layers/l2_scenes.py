"""L2 scenes: the memories changed since the last run fold into a bounded set of scene documents.

The model returns operations (create / update / merge / delete) on scene aliases; they are
validated (ids shown, scene count) before they become new scene versions. Old versions stay.
Heat is computed here, not by the model: a touched scene keeps `heat_decay` of its heat plus one
per memory folded in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from stratamem.domain import MemoryRecord, MemoryType, Mode, Scene, Scope
from stratamem.layers import offline
from stratamem.layers.model import stable_id
from stratamem.layers.schemas import SceneOp, SceneOps, Shown, check_scene_op, scene_count
from stratamem.layers.settings import LayerSettings
from stratamem.layers.views import Aliases, clip, memory_line
from stratamem.llm.prompts import Prompt
from stratamem.stages.checked import Items, Unusable, check_items, require_some

STAGE = "L2"


@dataclass(frozen=True, slots=True)
class SceneView:
    scenes: Aliases
    memories: Aliases


def scene_messages(
    prompt: Prompt,
    scenes: Sequence[Scene],
    changed: Sequence[MemoryRecord],
    settings: LayerSettings,
) -> tuple[list[dict[str, Any]], SceneView]:
    view = SceneView(
        Aliases.of("S", [s.id for s in scenes]), Aliases.of("M", [m.id for m in changed])
    )
    lines = [f"Keep at most {settings.max_scenes} scenes, each body under"
             f" {settings.max_scene_chars} characters.", "", "CURRENT scenes:"]  # fmt: skip
    for i, scene in enumerate(scenes, start=1):
        lines.append(f"[S{i}] {scene.title}: {scene.summary}")
        lines.append(f"  {clip(scene.body, settings.max_scene_chars)}")
    lines += ["(none)"] if not scenes else []
    lines += ["", "CHANGED memories:"]
    lines += [memory_line(f"M{i}", m, 400) for i, m in enumerate(changed, start=1)]
    messages = [
        {"role": "system", "content": prompt.text},
        {"role": "user", "content": "\n".join(lines)},
    ]
    return messages, view


def read_reply(reply: SceneOps, view: SceneView, settings: LayerSettings) -> Items[SceneOp]:
    """The reply's operations checked one by one. Unusable: every operation invalid, none at
    all although memories changed (nothing would fold them in), or too many scenes."""
    shown = Shown({"scenes": view.scenes.shown(), "memories": view.memories.shown()},
                  settings.min_memory_words)  # fmt: skip
    items = require_some(check_items(reply.operations, lambda raw: check_scene_op(raw, shown)),
                         "operation")  # fmt: skip
    if not items.kept and view.memories.real:
        changed = ", ".join(sorted(view.memories.real))
        raise Unusable(f"no operation folds in the changed memories ({changed}): update the"
                       " fitting scenes or create one")  # fmt: skip
    limit = settings.max_scenes
    if scene_count(len(view.scenes.real), items.kept) > limit:
        raise Unusable(f"the operations leave more than {limit} scenes; merge some")
    return items


@dataclass(frozen=True, slots=True)
class SceneContext:
    scope: Scope
    now: float
    mode: Mode
    id_seed: str
    settings: LayerSettings


def apply_ops(
    operations: Sequence[SceneOp], view: SceneView, scenes: Sequence[Scene], ctx: SceneContext
) -> list[Scene]:
    """New scene versions for the checked operations, in order."""
    current = {s.id: s for s in scenes}
    written: dict[str, Scene] = {}
    for index, op in enumerate(operations):
        memory_ids = tuple(view.memories.real[m] for m in op.memory_ids)
        for scene in _apply_one(op, index, view, {**current, **written}, memory_ids, ctx):
            written[scene.id] = scene
    return list(written.values())


def _apply_one(
    op: SceneOp,
    index: int,
    view: SceneView,
    live: dict[str, Scene],
    memory_ids: tuple[str, ...],
    ctx: SceneContext,
) -> list[Scene]:
    limit = ctx.settings.max_scene_chars
    if op.op == "create":
        scene_id = stable_id("sc", ctx.scope.tenant, ctx.id_seed, index)
        base = Scene(id=scene_id, tenant=ctx.scope.tenant, title="", summary="", body="",
                     version=0, created_at=ctx.now)  # fmt: skip
        return [_revise(base, op, memory_ids, ctx, limit)]
    targets = [live[view.scenes.real[s]] for s in op.scene_ids()]
    if op.op == "delete":
        return [_retire(targets[0], ctx)]
    if op.op == "update":
        return [_revise(targets[0], op, memory_ids, ctx, limit)]
    merged_ids = tuple(m for t in targets for m in t.memory_ids)
    kept = _revise(targets[0], op, merged_ids + memory_ids, ctx, limit)
    kept = replace(kept, heat=kept.heat + sum(t.heat for t in targets[1:]))
    return [kept, *(_retire(t, ctx) for t in targets[1:])]


def _revise(
    scene: Scene, op: SceneOp, memory_ids: tuple[str, ...], ctx: SceneContext, limit: int
) -> Scene:
    return replace(
        scene,
        title=(op.title or scene.title).strip(),
        summary=(op.summary or scene.summary).strip(),
        body=clip_body(op.body if op.body is not None else scene.body, limit),
        heat=scene.heat * ctx.settings.heat_decay + len(memory_ids),
        version=scene.version + 1,
        memory_ids=tuple(dict.fromkeys(scene.memory_ids + memory_ids)),
        updated_at=ctx.now,
        mode=ctx.mode,
    )


def _retire(scene: Scene, ctx: SceneContext) -> Scene:
    return replace(scene, version=scene.version + 1, deleted=True, updated_at=ctx.now,
                   mode=ctx.mode)  # fmt: skip


def clip_body(body: str, limit: int) -> str:
    body = body.strip()
    return body if len(body) <= limit else body[: limit - 1] + "…"


def offline_scenes(
    scenes: Sequence[Scene], changed: Sequence[MemoryRecord], ctx: SceneContext
) -> list[Scene]:
    """One extractive scene per memory type; the newest memories that fit form its body."""
    by_id = {s.id: s for s in scenes}
    out: list[Scene] = []
    for kind, title in offline.SCENE_TITLES.items():
        group = [m for m in changed if m.type is kind]
        if not group:
            continue
        scene_id = stable_id("sc", ctx.scope.tenant, "offline", kind.value)
        old = by_id.get(scene_id) or Scene(
            id=scene_id, tenant=ctx.scope.tenant, title=title, summary="", body="",
            version=0, created_at=ctx.now,
        )  # fmt: skip
        out.append(_offline_version(old, kind, group, ctx))
    return out


def _offline_version(
    old: Scene, kind: MemoryType, group: Sequence[MemoryRecord], ctx: SceneContext
) -> Scene:
    body = offline.scene_body(old.body, group, ctx.settings.max_scene_chars)
    return replace(
        old,
        summary=offline.scene_summary(kind, body),
        body=body,
        heat=old.heat * ctx.settings.heat_decay + len(group),
        version=old.version + 1,
        memory_ids=tuple(dict.fromkeys(old.memory_ids + tuple(m.id for m in group))),
        updated_at=ctx.now,
        mode=Mode.OFFLINE,
    )


def scene_index(scenes: Sequence[Scene]) -> list[str]:
    """One line per live scene, hottest first: what the stable block lists."""
    return [f"{s.title}: {s.summary}" for s in scenes if not s.deleted]
