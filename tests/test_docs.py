"""The README documents every setting and every CLI command."""

from __future__ import annotations

import re
from pathlib import Path

import click

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


def _options(command: click.Command) -> set[str]:
    """Every long option of `command` and of its subcommands, `--help` aside."""
    found = {
        name
        for param in command.params
        if isinstance(param, click.Option)
        for name in (*param.opts, *param.secondary_opts)
        if name.startswith("--")
    }
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            found |= _options(sub)
    return found - {"--help"}


def _reference_cells() -> dict[str, str]:
    """The first cell of each row of the CLI reference, joined per top-level command."""
    start = README.index("## CLI reference")
    table = README[start : README.index("\n## ", start)]
    cells: dict[str, str] = {}
    for row in re.findall(r"^\| `[^\n]*", table, re.M):
        cell = row.split(" | ")[0]
        name = re.match(r"\| `([\w-]+)", cell)
        assert name is not None, row
        cells[name.group(1)] = cells.get(name.group(1), "") + cell
    return cells


def test_the_cli_reference_names_each_option_that_exists_and_no_other() -> None:
    cells = _reference_cells()
    wrong = {}
    for name, command in cli.commands.items():
        documented = set(re.findall(r"--[a-z][a-z0-9-]*", cells.get(name, "")))
        actual = _options(command)
        if documented != actual:
            wrong[name] = (sorted(actual - documented), sorted(documented - actual))
    assert wrong == {}, "command: (options missing from its row, options that do not exist)"


def test_the_cli_reference_shows_the_global_options() -> None:
    start = README.index("## CLI reference")
    usage = README[start : README.index("\n\n", README.index("`stratamem [", start))]
    assert _options(click.Command("stratamem", params=cli.params)) <= set(
        re.findall(r"--[a-z][a-z-]*", usage)
    )


def test_every_service_setting_is_in_the_configuration_table() -> None:
    documented = [f"| `{ENV_PREFIX}{name.upper()}` |" for name in ServerSettings.model_fields]
    assert [d for d in documented if d not in README] == []


def test_every_llm_setting_is_in_its_table() -> None:
    fields = [name for name in LLMSettings.model_fields if name != "stages"]
    start = README.index("### LLM endpoint settings")
    table = README[start : README.index("\n### ", start + 1)]
    assert [name for name in fields if f"| `{name}` |" not in table] == []
