"""The README documents every setting (with the default of the code) and every CLI command
and option."""

from __future__ import annotations

import importlib
import json
import re
from enum import Enum
from pathlib import Path
from typing import Any

import click
import pytest
from pydantic_settings import BaseSettings

from stratamem.api.settings import ServerSettings
from stratamem.cli.main import cli
from stratamem.config import Settings
from stratamem.layers.settings import LayerSettings
from stratamem.llm.settings import LLMSettings
from stratamem.offload.settings import OffloadSettings
from stratamem.pipeline.settings import PipelineSettings
from stratamem.proxy.settings import ProxySettings

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: Each settings class, where its table starts, and the variable prefix its rows name a field
#: with (none: the field's name).
TABLES = [
    (Settings, "## Configuration", ""),
    (LLMSettings, "### LLM endpoint settings", ""),
    (OffloadSettings, "| offload setting |", ""),
    (ServerSettings, "| service setting |", "STRATAMEM_SERVER_"),
    (ProxySettings, "| proxy setting |", "STRATAMEM_PROXY_"),
    (PipelineSettings, "| pipeline setting |", ""),
    (LayerSettings, "Settings, as `STRATAMEM_LAYERS_<NAME>`", ""),
]
NOT_IN_TABLES = {"stages"}  # LLMSettings: the per-stage overrides, in the table's preamble


def _table_rows(start: str) -> dict[str, str]:
    """The first table after `start`: each row's name and default, as written."""
    at = README.index(start)
    at = README.index("\n|", at - 1) + 1
    table = README[at : README.index("\n\n", at)]
    return dict(re.findall(r"^\| `([^`]+)` \| ([^|]*?) \|", table, re.M))


def _shown(value: Any) -> str:
    """A default as the README writes it."""
    if value is None or value == []:
        return "–"
    if isinstance(value, list):  # as its variable takes it: comma-separated
        value = ",".join(f"{v:g}" if isinstance(v, float) else str(v) for v in value)
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, Enum):
        return f"`{value.value}`"
    if isinstance(value, float):
        return f"`{value:g}`"
    if isinstance(value, Path):
        return f"`./{value}`"
    return f"`{value}`"


@pytest.mark.parametrize(("cls", "start", "prefix"), TABLES, ids=[t[0].__name__ for t in TABLES])
def test_every_setting_is_in_its_table_with_the_default_of_the_code(
    cls: type[BaseSettings], start: str, prefix: str
) -> None:
    rows = _table_rows(start)
    fields = {n: f for n, f in cls.model_fields.items() if n not in NOT_IN_TABLES}
    names = {(prefix + name.upper() if prefix else name): name for name in fields}
    assert sorted(names.keys() - rows.keys()) == [], "settings missing from the table"
    assert sorted(rows.keys() - names.keys()) == [], "rows naming no setting"
    code = {key: _shown(fields[name].get_default(call_default_factory=True))
            for key, name in names.items()}  # fmt: skip
    assert {k: (rows[k], v) for k, v in code.items() if rows[k] != v} == {}


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


def _resolve(dotted: str) -> object:
    """`stratamem.offload.Offload`, `stratamem.runtime:worker_registry`: the object."""
    module, _, factory = dotted.partition(":")
    parts = module.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for name in [*parts[cut:], *([factory] if factory else [])]:
            found = getattr(found, name)
        return found
    raise ModuleNotFoundError(dotted)


def test_every_python_name_the_docs_give_exists() -> None:
    """Module paths and `module:factory` names (for `--executors`, imports)."""
    text = "\n".join(doc.read_text("utf-8") for doc in DOCS)
    names = {
        name
        for name in re.findall(r"\bstratamem(?:\.[A-Za-z_]\w*)+(?::\w+)?", text)
        if not name.endswith((".db", ".toml", ".key"))  # file names
    }
    assert len(names) > 10
    missing = []
    for name in sorted(names):
        try:
            _resolve(name)
        except (ImportError, AttributeError):
            missing.append(name)
    assert missing == []


def test_the_layout_names_only_files_that_exist() -> None:
    """Each `name.py`, `name/` of the README's layout exists where its entry says: a line at the
    left margin names paths of the checkout, an entry of the package names modules and
    directories somewhere under it."""
    block = README.split("## Layout", 1)[1].split("```", 2)[1]
    package, under, missing = ROOT / "src" / "stratamem", ROOT, []
    for line in block.splitlines()[2:]:
        names = re.findall(
            r"(?<![\w./])([\w-]+(?:/[\w-]+)*(?:\.py|/|\.yaml)|Dockerfile)(?![\w/])", line
        )
        if not line.startswith(" "):
            missing += [name for name in names if not (ROOT / name).exists()]
            continue
        if not line.startswith(" " * 3):  # an entry of the package: a directory or modules
            under = package / names[0] if names[0].endswith("/") else package
        found = {p.name for p in under.rglob("*")} | ({under.name} if under.is_dir() else set())
        missing += [name for name in names if name.rstrip("/") not in found]
    assert missing == []


def test_the_openclaw_readme_gives_the_plugins_settings_and_defaults() -> None:
    plugin = ROOT / "integrations" / "openclaw"
    schema = json.loads((plugin / "openclaw.plugin.json").read_text(encoding="utf-8"))
    declared = {
        name: json.dumps(spec["default"]) if "default" in spec else None
        for name, spec in schema["configSchema"]["properties"].items()
    }
    text = (plugin / "README.md").read_text(encoding="utf-8")
    sentence = text.split("Settings: ", 1)[1].split(". ", 1)[0]
    documented = dict(re.findall(r"`(\w+)`(?: \(([^)]+)\))?", sentence))
    assert {name: default or None for name, default in documented.items()} == declared
