"""Every `STRATAMEM_*` variable the code reads is documented, and every one the documentation
names is read: by a settings class (its prefix and a field, or an LLM stage override), by name in
the package, or by a script or test of this checkout (the real-model tier's, CI's).

The settings classes' fields are held to their README tables by tests/test_docs.py; this test
covers the variables read by name and every name the documentation writes out."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from stratamem.cli import envcheck
from stratamem.cli.main import cli
from stratamem.eval import qa
from stratamem.llm.settings import STAGE_MAX_TOKENS, split_stage, stage_key

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "integrations" / "openclaw"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), PLUGIN / "README.md"]
#: Where scripts and tests of this checkout read variables of their own.
TOOLING = [ROOT / "scripts", ROOT / "tests", ROOT / ".ci", ROOT / "Makefile",
           PLUGIN / "src", PLUGIN / "test"]  # fmt: skip
#: Files that name variables without reading them: the start-up check's lists, and this test's
#: misspelt names.
LISTS = {ROOT / "src" / "stratamem" / "cli" / "envcheck.py", Path(__file__).resolve()}
_NAME = re.compile(r"STRATAMEM_[A-Z0-9_]*[A-Z0-9]\b")
_LITERAL = re.compile(r"(?:[\"']|\$\{?)(STRATAMEM_[A-Z0-9_]*[A-Z0-9])\b(?![A-Z0-9_])")


def _files(paths: list[Path]) -> list[Path]:
    found = []
    for path in paths:
        found += [p for p in path.rglob("*") if p.is_file()] if path.is_dir() else [path]
    return [p for p in found if "node_modules" not in p.parts and p.suffix not in {".md", ".pyc"}
            and p.resolve() not in LISTS]  # fmt: skip


def _literals(paths: list[Path]) -> set[str]:
    """Variable names a file reads: a string literal (`os.environ.get("STRATAMEM_KEY")`) or a
    shell expansion (`${STRATAMEM_LLAMA_VENV:-…}`)."""
    return {m for p in _files(paths) for m in _LITERAL.findall(p.read_text(errors="replace"))}


def _by_settings(name: str) -> bool:
    """Whether a settings class reads `name`: its prefix and a field, or an LLM stage override
    (`STRATAMEM_LLM_<STAGE>_<FIELD>`)."""
    for cls, prefix in envcheck.PREFIXED:
        rest = name.removeprefix(prefix).lower()
        if name.startswith(prefix) and rest in cls.model_fields and rest != "stages":
            return True
    rest = name.removeprefix("STRATAMEM_LLM_")
    return name.startswith("STRATAMEM_LLM_") and split_stage(rest) is not None


def test_every_variable_read_by_name_is_documented() -> None:
    text = "\n".join(p.read_text(encoding="utf-8") for p in DOCS)
    read = _literals([ROOT / "src"])
    assert read, "the pattern finds the names the package reads"
    assert sorted(name for name in read if name not in text) == []


def test_every_documented_variable_is_read() -> None:
    named = {m for p in DOCS for m in _NAME.findall(p.read_text(encoding="utf-8"))}
    read = _literals([ROOT / "src"]) | _literals(TOOLING)
    unread = sorted(n for n in named if not _by_settings(n) and n not in read)
    assert unread == []


def test_the_start_up_check_knows_every_variable_that_is_read() -> None:
    """`stratamem.cli.envcheck` warns about a variable nothing reads: every name the package,
    its scripts and tests read, and every name the documentation gives, must be known to it."""
    named = {m for p in DOCS for m in _NAME.findall(p.read_text(encoding="utf-8"))}
    read = _literals([ROOT / "src"]) | _literals(TOOLING) | named
    assert sorted(read - envcheck.known_names()) == []


def test_the_start_up_check_knows_every_stage() -> None:
    stages = {stage_key(s) for s in (*STAGE_MAX_TOKENS, qa.ANSWER_STAGE, qa.JUDGE_STAGE)}
    assert stages == set(envcheck.STAGES)


def test_a_misspelt_variable_is_named_at_start_with_the_nearest_setting(tmp_path: Path) -> None:
    """A `STRATAMEM_*` variable nothing reads is a warning on stderr (the command still runs);
    the variables stratamem reads, in any case, are not."""
    env = {"STRATAMEM_LAYERS_L1_EVERY_TURN": "1", "STRATAMEM_LLM_L1_MODLE": "m",
           "stratamem_recall_k": "4", "STRATAMEM_LLM_OFFLOAD_L15_TIMEOUT_S": "5",
           "STRATAMEM_FROBNICATE": "1"}  # fmt: skip
    result = CliRunner().invoke(cli, ["--data-dir", str(tmp_path), "--embedder", "none",
                                      "capture", "--tenant", "t", "--session", "s", "--role",
                                      "user", "--text", "hello"], env=env)  # fmt: skip
    assert result.exit_code == 0, result.stderr
    assert result.stderr.splitlines() == [
        "warning: STRATAMEM_FROBNICATE is set, but stratamem reads no such variable",
        "warning: STRATAMEM_LAYERS_L1_EVERY_TURN is set, but stratamem reads no such variable"
        " (did you mean STRATAMEM_LAYERS_L1_EVERY_TURNS?)",
        "warning: STRATAMEM_LLM_L1_MODLE is set, but stratamem reads no such variable"
        " (did you mean STRATAMEM_LLM_L1_MODEL?)",
    ]
