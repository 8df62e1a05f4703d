"""The README documents every layer setting."""

from __future__ import annotations

from pathlib import Path

from stratamem.layers.settings import LayerSettings

README = (Path(__file__).parent.parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_layer_setting_is_in_the_readme() -> None:
    missing = [name for name in LayerSettings.model_fields if f"| `{name}` |" not in README]
    assert missing == []
