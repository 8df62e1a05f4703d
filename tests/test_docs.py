"""The README documents every setting and every CLI command."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.cli.main import cli
from stratamem.config import Settings

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_setting_is_in_the_configuration_table() -> None:
    missing = [name for name in Settings.model_fields if f"| `{name}` |" not in README]
    assert missing == []


def test_every_cli_command_is_in_the_reference() -> None:
    missing = [name for name in cli.commands if f"| `{name}" not in README]
    assert missing == []


def test_readme_python_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    block = README.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("STRATAMEM_EMBEDDER", "hash")
    exec(compile(block, "README.md", "exec"), {})
    assert (tmp_path / "my-memory" / "stratamem.db").exists()
