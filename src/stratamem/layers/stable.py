"""What recall's stable block carries from the layers: the profile and the scene index."""

from __future__ import annotations

from stratamem.domain import Scope
from stratamem.layers.l2_scenes import scene_index
from stratamem.store.layers.port import LayerStore


def stable_parts(layers: LayerStore, scope: Scope) -> tuple[str | None, list[str]]:
    """The current profile body (None when there is none) and one line per live scene."""
    profile = layers.profile(scope)
    return (None if profile is None else profile.body), scene_index(layers.current_scenes(scope))
