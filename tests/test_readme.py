"""Every command block of the README runs as written (with the shipped sample data), so the
README cannot drift from the code again. A block nobody can run here (Docker, `make test` inside
the test suite) is named with the test that covers it instead; a new block must be classified
here, or this test fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from agents import set_default_openai_api

from stratamem import Memory
from stratamem.client import Client
from stratamem.testing import Reply, ScriptedLLM
from tests.api.process import env_for_checkout, serving, stratamem

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
DEFAULT_URL = "http://127.0.0.1:8420"


@dataclass(frozen=True)
class Block:
    heading: str
    lang: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.heading} ({self.lang})"


def _blocks() -> list[Block]:
    found, heading = [], ""
    for match in re.finditer(r"^(#{2,3} [^\n]+)$|^```(\w+)\n(.*?)^```$", README, re.M | re.S):
        if match.group(1):
            heading = match.group(1).lstrip("# ").strip()
        else:
            found.append(Block(heading, match.group(2), match.group(3)))
    return found


#: How each command block is checked: run here (`sandbox`, `service`, `make -n`, `exec`,
#: `agents`), or by the named test.
HOW = {
    "The two commands (sh)": "make -n",
    "Quickstart: the service (sh)": "tests/api/test_readme_quickstart.py",
    "Quickstart: the library and the CLI (sh)": "sandbox",
    "Quickstart: the library and the CLI (python)": "exec",
    "The Python client (python)": "service",
    "The memory proxy: any agent, one URL (python)": "tests/proxy/test_readme_proxy.py",
    "The memory proxy: any agent, one URL (sh)": "tests/proxy/test_readme_proxy.py",
    "Context offload (python)": "exec",
    "Memory layers (sh)": "sandbox",
    "LangGraph (python)": "exec",
    "OpenAI Agents SDK (python)": "agents",
    "Running in a container (sh)": "tests/test_container.py",
}
NOT_COMMANDS = {"toml", "text"}  # a config file (tests/api/test_settings.py), output shown


def _blocks_run(how: str) -> list[Block]:
    return [b for b in _blocks() if HOW.get(b.name) == how]


def test_every_command_block_is_run_or_covered() -> None:
    commands = [b.name for b in _blocks() if b.lang not in NOT_COMMANDS]
    assert sorted(set(commands)) == sorted(HOW), "classify the README's new block in HOW"
    for how in HOW.values():
        assert "/" not in how or (ROOT / how).exists(), how


def _sandbox(tmp_path: Path) -> Path:
    """A directory like a fresh clone's root, without writing into this checkout."""
    for name in (".venv", "src", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    return tmp_path


def _run_sh(block: Block, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", block.text], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_make_targets_exist() -> None:
    [block] = _blocks_run("make -n")
    for line in block.text.splitlines():
        target = line.split("#")[0].split()
        assert target[0] == "make"
        done = subprocess.run(["make", "-n", *target[1:]], cwd=ROOT, capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert done.returncode == 0, done.stderr


@pytest.mark.slow
@pytest.mark.parametrize("block", _blocks_run("sandbox"), ids=lambda b: b.heading)
def test_shell_block_runs(block: Block, tmp_path: Path) -> None:
    # The reader's shell has the venv activated (the CLI quickstart's first line); the hashing
    # embedder stands in for the local model, only to keep the test quick.
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    env = env_for_checkout({"STRATAMEM_EMBEDDER": "hash:64", "PATH": path})
    done = _run_sh(block, _sandbox(tmp_path), env)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("block", _blocks_run("exec"), ids=lambda b: b.heading)
def test_python_block_runs(block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(_sandbox(tmp_path))
    monkeypatch.setenv("STRATAMEM_EMBEDDER", "hash:64")
    exec(compile(block.text, f"README.md: {block.heading}", "exec"), {"__name__": "__readme__"})


def test_the_library_block_prints_what_the_readme_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    name = "Quickstart: the library and the CLI"
    [code] = [b for b in _blocks() if b.name == f"{name} (python)"]
    [shown] = [b for b in _blocks() if b.name == f"{name} (text)"]
    monkeypatch.chdir(_sandbox(tmp_path))
    monkeypatch.setenv("STRATAMEM_EMBEDDER", "hash:64")
    exec(compile(code.text, f"README.md: {name}", "exec"), {"__name__": "__readme__"})
    day = re.compile(r"\d{4}-\d{2}-\d{2}")  # the capture's date: today
    assert day.sub("DAY", capsys.readouterr().out) == day.sub("DAY", shown.text)


@pytest.mark.slow
def test_client_block_runs_against_a_service(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [block] = _blocks_run("service")
    data = tmp_path / "stratamem-data"  # as `make run` leaves it: the block reads its key file
    stratamem(data, "tenants", "create", "demo")
    key = stratamem(data, "keys", "create", "demo").stdout.strip()
    (data / "demo.key").write_text(key + "\n")
    monkeypatch.chdir(tmp_path)
    with serving(data, tmp_path / "serve.log") as server:
        code = block.text.replace(DEFAULT_URL, server.url)
        exec(compile(code, "README.md: client", "exec"), {})
        with Client(server.url, key) as memory:
            assert [t.text for t in memory.turns("demo", "s1")] == [
                "I adopted a dog called Biscuit"]  # fmt: skip


def test_agents_block_runs_as_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The block as written, the SDK's model reached through OPENAI_BASE_URL on the scripted
    endpoint: the run's turns are the session's L0, and the recalled memory reached the model."""
    [block] = _blocks_run("agents")
    monkeypatch.chdir(_sandbox(tmp_path))
    monkeypatch.setenv("STRATAMEM_EMBEDDER", "hash:64")
    with ScriptedLLM() as llm:
        monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "scripted")
        llm.push(Reply.text("About 5 km."))
        try:
            exec(compile(block.text, "README.md: agents", "exec"), {"__name__": "__readme__"})
        finally:
            set_default_openai_api("responses")  # the SDK's default again (tracing stays off)
        [call] = llm.calls()
    assert capsys.readouterr().out == "About 5 km.\n"
    assert "kilometres" in str(call.messages)
    with Memory(data_dir=Path("my-memory"), embedder="hash:64") as memory:
        assert [t.text for t in memory.turns("maya", "chat-1")] == [
            "How far should I walk today?", "About 5 km."]  # fmt: skip


def test_the_sample_paths_exist() -> None:
    for path in re.findall(r"(?:src|tests)/[\w/.-]+\.(?:jsonl|json)", README):
        assert (ROOT / path).exists(), path
