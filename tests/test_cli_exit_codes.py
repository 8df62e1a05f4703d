"""Every CLI command's typed errors reach their family's exit code (`cli.exits.EXIT_CODES`): the
root group maps them once, so no command can bypass or forget the table."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from stratamem.cli.exits import EXIT_CODES
from stratamem.cli.main import cli
from stratamem.pipeline.errors import DeadLetterNotFound, UnknownTaskType


def _leaves(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    ctx = click.Context(group)
    found: list[tuple[str, ...]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        if isinstance(command, click.Group):
            found.extend(_leaves(command, (*path, name)))
        else:
            found.append((*path, name))
    return found


def _command(path: tuple[str, ...]) -> click.Command:
    command: click.Command = cli
    for name in path:
        assert isinstance(command, click.Group)
        found = command.get_command(click.Context(command), name)
        assert found is not None
        command = found
    return command


LEAVES = _leaves(cli)


def test_the_walk_finds_every_command() -> None:
    names = {" ".join(path) for path in LEAVES}
    assert {"capture", "worker", "pipeline status", "pipeline dead-letters requeue", "migrate",
            "failures list", "offload entries", "serve"} <= names  # fmt: skip
    assert len(names) > 40


@pytest.mark.parametrize("path", LEAVES, ids=" ".join)
def test_every_command_maps_each_error_family(
    path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    command = _command(path)
    monkeypatch.setattr(command, "params", [])  # no options to supply: the body raises at once
    for family, code in EXIT_CODES:

        def fail(*_: object, **__: object) -> None:
            raise family(f"{family.__name__} from {' '.join(path)}")  # noqa: B023

        monkeypatch.setattr(command, "callback", fail)
        result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), *path])
        assert result.exit_code == code, (path, family, result.output)
        assert f"error: {family.__name__} from" in result.stderr


def test_subclasses_take_their_family_code(tmp_path: Path) -> None:
    """A pipeline error that is also a caller's mistake or a missing record says so."""
    run = CliRunner().invoke
    missing = run(cli, ["--data-dir", str(tmp_path), "pipeline", "dead-letters", "requeue", "x"])
    assert missing.exit_code == 3 and "no dead letter" in missing.stderr
    assert issubclass(DeadLetterNotFound, LookupError) and issubclass(UnknownTaskType, ValueError)
    unknown = run(cli, ["--data-dir", str(tmp_path), "pipeline", "executions", "--tenant", "a"])
    assert unknown.exit_code == 5 and "no store" in unknown.stderr  # ConfigError
