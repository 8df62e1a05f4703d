"""`stratamem --help` imports the CLI's shell, not the package: its commands are imported when
one runs, and the listing is written from `cli.main.COMMANDS`, held here to each command."""

from __future__ import annotations

import os
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from stratamem.cli.main import COMMANDS, cli, summary_of


def test_the_help_imports_no_command_and_not_the_library() -> None:
    probe = (
        "import sys\n"
        "from stratamem.cli.main import cli\n"
        "try:\n"
        "    cli(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "loaded = sorted(m for m in sys.modules if m.startswith('stratamem.'))\n"
        "print(' '.join(loaded))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)  # fmt: skip
    loaded = done.stdout.strip().splitlines()[-1].split()
    assert set(loaded) <= {"stratamem.cli", "stratamem.cli.main", "stratamem.cli.exits",
                           "stratamem.errors"}, loaded  # fmt: skip
    assert "Commands:" in done.stdout and "worker" in done.stdout


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_each_listed_summary_is_the_command_s_own(name: str) -> None:
    command = cli.get_command(click.Context(cli), name)
    assert command is not None and command.name == name
    for limit in (20, 45, 64, 80, 200):
        assert summary_of(name).get_short_help_str(limit) == command.get_short_help_str(limit)


def test_the_listing_is_what_the_commands_would_print() -> None:
    ctx = click.Context(cli, terminal_width=80)
    lazy, loaded = ctx.make_formatter(), ctx.make_formatter()
    cli.format_commands(ctx, lazy)
    click.Group.format_commands(cli, ctx, loaded)  # every command imported, asked for its help
    assert lazy.getvalue() == loaded.getvalue() and "worker" in lazy.getvalue()
    assert "Commands:" in CliRunner().invoke(cli, ["--help"]).output


def test_every_top_level_command_is_listed() -> None:
    """A command defined in a `stratamem.cli` module and in no group is one of `COMMANDS` (a new
    command is reached only through its row there)."""
    import importlib  # noqa: PLC0415
    import pkgutil  # noqa: PLC0415

    import stratamem.cli  # noqa: PLC0415

    defined: dict[int, tuple[str, click.Command]] = {}
    for info in pkgutil.iter_modules(stratamem.cli.__path__):
        module = importlib.import_module(f"stratamem.cli.{info.name}")
        for attr, value in vars(module).items():
            if isinstance(value, click.Command) and value is not cli:
                defined[id(value)] = (f"{info.name}:{attr}", value)
    inner = {id(sub) for _, command in defined.values() if isinstance(command, click.Group)
             for sub in command.commands.values()}  # fmt: skip
    listed = {where for where, _ in COMMANDS.values()}
    unlisted = [w for key, (w, _) in defined.items() if key not in inner and w not in listed]
    assert sorted(unlisted) == [] and "pipeline_cmds:worker" in listed


def test_the_package_s_public_names_resolve_lazily() -> None:
    """`stratamem/__init__` imports nothing until a name is used; every name it exports resolves
    (PEP 562), and one it does not is an AttributeError."""
    probe = (
        "import sys, stratamem\n"
        "assert not any(m.startswith('stratamem.') for m in sys.modules), sorted(sys.modules)\n"
        "for name in stratamem.__all__:\n"
        "    assert getattr(stratamem, name) is not None, name\n"
        "try:\n"
        "    stratamem.no_such_name\n"
        "except AttributeError:\n"
        "    print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True)  # fmt: skip
    assert done.stdout.strip() == "ok"


def test_the_command_runs_numpy_on_one_blas_thread_unless_told_otherwise() -> None:
    code = (
        "import os, sys\n"
        "sys.argv = ['stratamem', '--help']\n"
        "from stratamem.cli.main import main\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'), 'numpy' in sys.modules, file=sys.stderr)\n"
    )
    for given, expected in ((None, "1 False"), ("2", "2 False")):
        env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
        if given is not None:
            env["OPENBLAS_NUM_THREADS"] = given
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True)  # fmt: skip
        assert done.stderr.strip().splitlines()[-1] == expected
