"""L3 profile: one bounded persona document per tenant, synthesised from the scenes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratamem.domain import Profile, Scene
from stratamem.layers.settings import LayerSettings
from stratamem.layers.views import clip
from stratamem.llm.prompts import Prompt

STAGE = "L3"


def profile_messages(
    prompt: Prompt, scenes: Sequence[Scene], current: Profile | None, settings: LayerSettings
) -> list[dict[str, Any]]:
    lines = [f"Write at most {settings.max_profile_chars} characters.", "", "SCENES:"]
    for scene in scenes:
        lines.append(f"- {scene.title}: {scene.summary}")
        lines.append(f"  {clip(scene.body, settings.max_scene_chars)}")
    lines += ["(none)"] if not scenes else []
    lines += ["", "CURRENT profile:", current.body if current else "(none)"]
    return [
        {"role": "system", "content": prompt.text},
        {"role": "user", "content": "\n".join(lines)},
    ]


def bounded(body: str, limit: int) -> str:
    """The profile cut at the last line that fits `limit` characters."""
    body = body.strip()
    if len(body) <= limit:
        return body
    cut = body[:limit]
    return cut[: cut.rfind("\n")] if "\n" in cut else cut[: limit - 1] + "…"
