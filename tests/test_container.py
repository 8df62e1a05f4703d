"""The Dockerfile and compose file (no Docker daemon here): hadolint passes, compose agrees with
the image, the image's entry point with its environment serves on the default embedder and
answers its health check, and (`STRATAMEM_TEST_IMAGE=1`, `make image-check`: minutes) the build
stage's RUN commands, run in a fresh venv, install a stratamem (without torch) that does the
same with the model graph they built."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from stratamem.api.settings import ENV_PREFIX, ServerSettings
from stratamem.llm.settings import LLMSettings
from tests.api.process import running

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = (ROOT / "Dockerfile").read_text(encoding="utf-8")
IMAGE_VENV = "/opt/stratamem"


def _instructions(stage: int) -> list[tuple[str, str]]:
    """(instruction, arguments) of a build stage, continuation lines joined."""
    text = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    stages = re.split(r"^FROM .*$", text, flags=re.MULTILINE)
    lines = [line.strip() for line in stages[stage + 1].splitlines()]
    found = [line.split(maxsplit=1) for line in lines if line and not line.startswith("#")]
    return [(parts[0], parts[1] if len(parts) > 1 else "") for parts in found]


def _args() -> dict[str, str]:
    return dict(re.findall(r"^ARG (\w+)=(\S+)$", DOCKERFILE, flags=re.MULTILINE))


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    done = subprocess.run([hadolint, str(ROOT / "Dockerfile")], capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_image_runs_as_a_user_with_a_volume_a_health_check_and_the_service() -> None:
    runtime = dict(_instructions(1))
    assert runtime["USER"] == "10001:10001"
    assert runtime["VOLUME"] == '["/data"]' and "STRATAMEM_DATA_DIR=/data" in runtime["ENV"]
    assert "/v1/ready" in runtime["HEALTHCHECK"]  # healthy once the model is loaded
    assert runtime["ENTRYPOINT"] == '["stratamem"]' and runtime["CMD"] == '["serve"]'
    assert "python:3.11-slim" in _args()["PYTHON_IMAGE"]


def test_compose_runs_that_image_with_known_settings() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text(encoding="utf-8"))
    service = compose["services"]["stratamem"]
    assert service["build"] == "." and service["volumes"] == ["stratamem-data:/data"]
    assert service["ports"] == ["127.0.0.1:8420:8420"]
    assert dict(_instructions(1))["EXPOSE"] == "8420"
    known = {f"{ENV_PREFIX}{n.upper()}" for n in ServerSettings.model_fields}
    known |= {f"STRATAMEM_LLM_{n.upper()}" for n in LLMSettings.model_fields}
    assert set(service["environment"]) <= known
    assert "stratamem-data" in compose["volumes"]


@pytest.mark.slow
def test_the_entry_point_in_the_image_environment_passes_the_health_check(tmp_path: Path) -> None:
    _serve_and_check_health([sys.executable, "-m", "stratamem.cli.main"], tmp_path)


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("STRATAMEM_TEST_IMAGE") != "1",
                    reason="installs the package into a fresh venv: make image-check")
def test_the_build_steps_install_a_service_that_passes_the_health_check(tmp_path: Path) -> None:
    source, venv = tmp_path / "src", tmp_path / "opt-stratamem"
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name if source.exists() else _mkdir(source) / name)
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__"))
    build_args = {**os.environ, **_args()}  # as Docker gives RUN the ARGs' defaults (EXTRAS)
    for run in (args for kind, args in _instructions(0) if kind == "RUN"):
        command = run.replace(IMAGE_VENV, str(venv)).replace('"/src[', f'"{source}[')
        done = subprocess.run(["bash", "-euo", "pipefail", "-c", command], capture_output=True,
                              text=True, timeout=1800, check=False, env=build_args)  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert not (venv / "lib" / "python3.11" / "site-packages" / "torch").exists()
    _serve_and_check_health([str(venv / "bin" / "stratamem")], tmp_path, venv)


def _mkdir(path: Path) -> Path:
    path.mkdir(parents=True)
    return path


def _image_env(tmp_path: Path, venv: Path | None) -> dict[str, str]:
    """The runtime stage's ENV, on the loopback and a free port, data in `tmp_path`; the image's
    venv (and model cache) is `venv`, else this checkout with the user's model cache."""
    declared = dict(p.split("=", 1) for p in dict(_instructions(1))["ENV"].split())
    if venv is None:
        declared.pop("STRATAMEM_CACHE_DIR")
    else:
        declared = {k: v.replace(IMAGE_VENV, str(venv)) for k, v in declared.items()}
    declared |= {"STRATAMEM_SERVER_HOST": "127.0.0.1", "STRATAMEM_SERVER_PORT": "0",
                 "STRATAMEM_DATA_DIR": str(tmp_path / "data")}  # fmt: skip
    declared.pop("PATH")
    env = {k: v for k, v in os.environ.items() if not k.startswith("STRATAMEM_")}
    return {**env, "PYTHONPATH": str(ROOT / "src"), **declared}


def _serve_and_check_health(
    stratamem: list[str], tmp_path: Path, venv: Path | None = None
) -> None:
    """The image's command (`stratamem serve`) and health check, the default embedder."""
    env = _image_env(tmp_path, venv)
    if venv is not None:  # the installed venv, not this checkout
        env.pop("PYTHONPATH")
    with running([*stratamem, "serve"], tmp_path / "serve.log", env) as server:
        check = dict(_instructions(1))["HEALTHCHECK"].split("CMD ", 1)[1]
        argv = yaml.safe_load(check.replace("http://127.0.0.1:8420", server.url))
        python = str(venv / "bin" / argv[0]) if venv else sys.executable
        done = subprocess.run([python, *argv[1:]], capture_output=True, text=True, timeout=30,
                              check=False)  # fmt: skip
        stats = subprocess.run([*stratamem, "stats", "--json"], env=env, capture_output=True,
                               text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert stats.returncode == 0, stats.stderr
    assert '"embedding_model": "all-MiniLM-L6-v2"' in stats.stdout  # the default embedder
