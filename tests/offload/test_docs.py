"""The README documents every offload setting."""

from __future__ import annotations

from pathlib import Path

from stratamem.offload import OffloadSettings

README = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")


def test_every_offload_setting_is_documented() -> None:
    missing = [name for name in OffloadSettings.model_fields if f"| `{name}` |" not in README]
    assert missing == []
