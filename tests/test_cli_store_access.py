"""From the CLI, a store that cannot be written or is not there is one clear line and an exit
code, never a traceback or an empty store made by mistake."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from tests.stores import fresh_pg_url

NOBODY = 65534


def run(data_dir: Path, *args: str, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    arguments = ["--data-dir", str(data_dir), "--embedder", "none", *args]
    result = CliRunner().invoke(cli, arguments, env=env)
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A directory another user can reach (pytest's own tmp dirs are private to their owner)."""
    base = Path(tempfile.mkdtemp(prefix="stratamem-ro-"))
    base.chmod(0o755)
    yield base
    for path in (base, *base.rglob("*")):
        path.chmod(0o777 if path.is_dir() else 0o666)
    shutil.rmtree(base)


@contextmanager
def as_someone_else() -> Iterator[None]:
    """File modes do not stop root: as root, act as `nobody` meanwhile."""
    if os.geteuid() != 0:
        yield
        return
    os.seteuid(NOBODY)
    try:
        yield
    finally:
        os.seteuid(0)


def capture(data: Path, text: str) -> tuple[int, str, str]:
    return run(data, "capture", "--tenant", "t1", "--session", "s1", "--text", text)


@pytest.mark.parametrize("read_only", ["files", "directory"])
def test_a_read_only_store_is_one_line_and_an_exit_code(shared_dir: Path, read_only: str) -> None:
    data = shared_dir / "data"
    assert capture(data, "first words")[0] == 0
    data.chmod(0o555 if read_only == "directory" else 0o777)
    for path in data.iterdir():
        path.chmod(0o444)
    with as_someone_else():
        code, _, err = capture(data, "more words")
    assert code == 6, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    "command",
    [["stats"], ["search", "--tenant", "t1", "x"], ["recall", "--tenant", "t1", "x"],
     ["memories", "list", "--tenant", "t1"], ["profile", "show", "--tenant", "t1"]],
)  # fmt: skip
def test_reading_commands_refuse_a_directory_without_a_store(
    tmp_path: Path, command: list[str]
) -> None:
    mistyped = tmp_path / "stratamem-dta"
    code, out, err = run(mistyped, *command)
    assert code == 5, (out, err)
    assert "no store in" in err and str(mistyped) in err
    assert not mistyped.exists()


@pytest.mark.postgres
@pytest.mark.parametrize(
    "command",
    [["stats"], ["search", "--tenant", "t1", "x"], ["memories", "list", "--tenant", "t1"],
     ["profile", "show", "--tenant", "t1"]],
)  # fmt: skip
def test_reading_commands_read_the_store_a_url_names(
    request: pytest.FixtureRequest, tmp_path: Path, command: list[str]
) -> None:
    """With `STRATAMEM_STORE_URL` naming a PostgreSQL store, no SQLite file is looked for (a
    deployment's operator runs them on a machine without one)."""
    url = fresh_pg_url(request.getfixturevalue("pg_server"))
    data = tmp_path / "data"
    assert run(data, "capture", "--tenant", "t1", "--session", "s1", "--text", "x",
               env={"STRATAMEM_STORE_URL": url})[0] == 0  # fmt: skip
    code, out, err = run(data, *command, env={"STRATAMEM_STORE_URL": url})
    assert code == 0, (out, err)
    assert not (data / "stratamem.db").exists()


def test_mcp_refuses_a_directory_with_no_store_and_a_tenant_it_does_not_know(
    tmp_path: Path,
) -> None:
    code, _, err = run(tmp_path / "mistyped", "mcp", "--tenant", "t1")
    assert code == 5 and "no store in" in err
    assert not (tmp_path / "mistyped").exists()  # nothing made where an MCP host points by typo
    data = tmp_path / "data"
    assert run(data, "tenants", "create", "bob")[0] == 0
    code, _, err = run(data, "mcp", "--tenant", "t1")
    assert code == 5
    assert "`stratamem tenants create t1` (registered: bob)" in err


def test_empty_answers_say_why_on_stderr(tmp_path: Path) -> None:
    data = tmp_path / "data"
    code, out, _ = run(data, "capture", "--tenant", "t1", "--session", "s1", "--role", "Human",
                       "--text", "I keep bees", "--json")  # fmt: skip
    assert code == 0 and '"stored"' in out  # `human` is an alias of user, as in REST
    code, out, err = run(data, "search", "--tenant", "nobody", "bees")
    assert (code, out) == (0, "")
    assert "tenant 'nobody' has nothing stored here" in err
    code, out, err = run(data, "memories", "list", "--tenant", "t1")
    assert (code, out) == (0, "")
    assert "no memories (tenant 't1' has 1 turns and 0 memories)" in err
