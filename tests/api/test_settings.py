"""Settings are validated at start, with messages that say what to fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.api.settings import load_settings
from stratamem.errors import ConfigError


def test_defaults_are_local_with_cors_off(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOST", "PORT", "ADMIN_KEY", "CORS_ORIGINS"):
        monkeypatch.delenv(f"STRATAMEM_SERVER_{name}", raising=False)
    _, server, _ = load_settings()
    assert (server.host, server.cors_origins, server.admin_key) == ("127.0.0.1", [], None)


@pytest.mark.parametrize(
    ("overrides", "names"),
    [
        ({"admin_key": "short"}, ["STRATAMEM_SERVER_ADMIN_KEY", "at least 32"]),
        ({"cors_origins": "*"}, ["STRATAMEM_SERVER_CORS_ORIGINS", "wildcard"]),
        ({"port": 70000}, ["STRATAMEM_SERVER_PORT"]),
        ({"max_body_bytes": 10}, ["STRATAMEM_SERVER_MAX_BODY_BYTES"]),
    ],
)
def test_bad_values_are_refused_naming_the_variable(
    overrides: dict[str, object], names: list[str]
) -> None:
    with pytest.raises(ConfigError) as caught:
        load_settings(server=overrides)
    for name in names:
        assert name in str(caught.value)


def test_environment_beats_the_config_file_and_options_beat_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "stratamem.toml"
    config.write_text(
        'embedder = "none"\nrecall_k = 3\n[server]\nport = 9001\nhost = "0.0.0.0"\n'
        'cors_origins = ["https://a.example", "http://localhost:3000"]\n'
        "[pipeline]\nretry_limit = 7\n"
    )
    monkeypatch.setenv("STRATAMEM_SERVER_PORT", "9002")
    monkeypatch.setenv("STRATAMEM_RECALL_K", "4")
    core, server, pipeline = load_settings(config, server={"host": "127.0.0.2"})
    assert (core.embedder, core.recall_k) == ("none", 4)
    assert (server.port, server.host) == (9002, "127.0.0.2")
    assert server.cors_origins == ["https://a.example", "http://localhost:3000"]
    assert pipeline.retry_limit == 7


def test_inconsistent_pipeline_settings_are_a_config_error(tmp_path: Path) -> None:
    config = tmp_path / "stratamem.toml"
    config.write_text("[pipeline]\nlock_ttl_ms = 100000\nreclaim_idle_ms = 1000\n")
    with pytest.raises(ConfigError, match="reclaim_idle_ms"):
        load_settings(config)


def test_a_broken_config_file_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("port = = 1")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(broken)
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "missing.toml")
    unknown = tmp_path / "unknown.toml"
    unknown.write_text("[server]\nprot = 1\n")
    with pytest.raises(ConfigError, match="prot"):
        load_settings(unknown)


def test_a_bad_llm_or_layer_variable_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STRATAMEM_LLM_BASE_URL", "localhost:8000")
    with pytest.raises(ConfigError, match="STRATAMEM_LLM_BASE_URL"):
        load_settings()
    monkeypatch.delenv("STRATAMEM_LLM_BASE_URL")
    monkeypatch.setenv("STRATAMEM_LAYERS_MAX_SCENES", "0")
    with pytest.raises(ConfigError, match="STRATAMEM_LAYERS_MAX_SCENES"):
        load_settings()


def test_a_bad_core_variable_stops_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """`STRATAMEM_ONNX_SPINNING` is read with the other settings (not when the model loads)."""
    monkeypatch.setenv("STRATAMEM_ONNX_SPINNING", "fast")
    with pytest.raises(ConfigError, match="STRATAMEM_ONNX_SPINNING: Input should be a valid bool"):
        load_settings()
    monkeypatch.setenv("STRATAMEM_ONNX_SPINNING", "on")
    assert load_settings().core.onnx_spinning


def test_the_readme_config_file_example_loads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("STRATAMEM_DATA_DIR", "STRATAMEM_SERVER_HOST", "STRATAMEM_SERVER_WORKERS",
                 "STRATAMEM_PIPELINE_BACKEND"):
        monkeypatch.delenv(name, raising=False)
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    example = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    config = tmp_path / "stratamem.toml"
    config.write_text(example)
    core, server, pipeline = load_settings(config)
    assert (str(core.data_dir), server.host, server.workers) == ("/var/lib/stratamem", "0.0.0.0", 4)
    assert pipeline.backend == "redis"


def test_an_unknown_key_at_the_config_files_top_level_is_a_config_error(tmp_path: Path) -> None:
    """The core settings would ignore it: a misspelt key, or a table for settings the file does
    not hold, stops the start and is named."""
    config = tmp_path / "stratamem.toml"
    config.write_text('embeder = "none"\n[layers]\nmax_scenes = 3\n[server]\nport = 9001\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert "`embeder` is not a setting (did you mean `embedder`?)" in message
    assert "`layers` is not a setting" in message
    assert "STRATAMEM_LAYERS_*" in message
