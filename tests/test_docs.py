"""The README documents every setting and every CLI command."""

from __future__ import annotations

from pathlib import Path

from stratamem.api.settings import ENV_PREFIX, ServerSettings
from stratamem.cli.main import cli
from stratamem.config import Settings
from stratamem.llm.settings import LLMSettings

README = (Path(__file__).parent.parent / "README.md").read_text(encoding="utf-8")


def test_every_setting_is_in_the_configuration_table() -> None:
    missing = [name for name in Settings.model_fields if f"| `{name}` |" not in README]
    assert missing == []


def test_every_cli_command_is_in_the_reference() -> None:
    missing = [name for name in cli.commands if f"| `{name}" not in README]
    assert missing == []


def test_every_service_setting_is_in_the_configuration_table() -> None:
    documented = [f"| `{ENV_PREFIX}{name.upper()}` |" for name in ServerSettings.model_fields]
    assert [d for d in documented if d not in README] == []


def test_every_llm_setting_is_in_its_table() -> None:
    fields = [name for name in LLMSettings.model_fields if name != "stages"]
    start = README.index("### LLM endpoint settings")
    table = README[start : README.index("\n### ", start + 1)]
    assert [name for name in fields if f"| `{name}` |" not in table] == []
