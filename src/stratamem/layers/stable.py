"""What recall's stable block carries from the layers: the profile and the scene index.

A scene or profile built from a memory whose validity was ended (forgotten) is left out until
the layers have written it again (`store/lineage/rows.py`, stale records)."""

from __future__ import annotations

from stratamem.domain import Scope
from stratamem.layers.l2_scenes import scene_index
from stratamem.store.layers.port import LayerStore
from stratamem.store.lineage.rows import FORGOTTEN, PROFILE, PROFILE_ID, SCENE, Ref


def stable_parts(layers: LayerStore, scope: Scope) -> tuple[str | None, list[str]]:
    """The current profile body (None when there is none) and one line per live scene."""
    withheld = {ref for ref, reason in layers.stale(scope).items() if reason == FORGOTTEN}
    profile = layers.profile(scope)
    if Ref(PROFILE, PROFILE_ID) in withheld:
        profile = None
    scenes = [s for s in layers.current_scenes(scope) if Ref(SCENE, s.id) not in withheld]
    return (None if profile is None else profile.body), scene_index(scenes)
