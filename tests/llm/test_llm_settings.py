"""LLM settings from the environment, with per-stage overrides."""

from __future__ import annotations

import os

import pytest
from pydantic import SecretStr, ValidationError

from stratamem.errors import ConfigError
from stratamem.llm import LLMSettings, StageSettings


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in list(os.environ):
        if name.upper().startswith("STRATAMEM_LLM_"):
            monkeypatch.delenv(name)
    return monkeypatch


def test_defaults_are_unconfigured() -> None:
    settings = LLMSettings()
    assert not settings.configured
    with pytest.raises(ConfigError, match="STRATAMEM_LLM_L1_BASE_URL"):
        settings.for_stage("L1")


def test_environment_and_stage_overrides(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("STRATAMEM_LLM_BASE_URL", "http://127.0.0.1:8000/v1/")
    clean_env.setenv("STRATAMEM_LLM_API_KEY", "sk-default")
    clean_env.setenv("STRATAMEM_LLM_MODEL", "small")
    clean_env.setenv("STRATAMEM_LLM_MAX_RETRY_DELAY_S", "5")
    clean_env.setenv("STRATAMEM_LLM_L1_MODEL", "large")
    clean_env.setenv("STRATAMEM_LLM_L2_BASE_URL", "https://other.example/v1")
    clean_env.setenv("STRATAMEM_LLM_OFFLOAD_L15_TIMEOUT_S", "7.5")
    clean_env.setenv("stratamem_llm_l3_temperature", "0.3")
    settings = LLMSettings()
    assert settings.configured
    assert settings.max_retry_delay_s == 5.0
    assert set(settings.stages) == {"l1", "l2", "offload_l15", "l3"}

    l1 = settings.for_stage("L1")
    assert (l1.base_url, l1.model, l1.api_key) == (
        "http://127.0.0.1:8000/v1",
        "large",
        "sk-default",
    )
    assert settings.for_stage("L2").base_url == "https://other.example/v1"
    assert settings.for_stage("offload-l15").timeout_s == 7.5
    assert settings.for_stage("offload-l1").timeout_s == 60.0
    assert settings.for_stage("L3").temperature == 0.3
    assert settings.for_stage("L4").model == "small"


def test_stage_overrides_in_code_and_as_json(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("STRATAMEM_LLM_STAGES", '{"offload-l2": {"model": "diagrammer"}}')
    settings = LLMSettings(
        base_url="http://h/v1", model="m", stages={"L1": StageSettings(timeout_s=3)}
    )
    assert settings.for_stage("l1").timeout_s == 3
    assert LLMSettings(base_url="http://h/v1", model="m").for_stage("offload-l2").model == (
        "diagrammer"
    )


def test_api_key_is_secret() -> None:
    settings = LLMSettings(base_url="http://h/v1", model="m", api_key=SecretStr("sk-secret"))
    assert "sk-secret" not in repr(settings)
    assert settings.for_stage("L1").api_key == "sk-secret"


@pytest.mark.parametrize(
    "values",
    [
        {"base_url": "file:///etc/passwd"},
        {"timeout_s": 0},
        {"max_attempts": 0},
        {"temperature": 3},
        {"stages": {"L1": {"base_url": "ftp://x"}}},
        {"stages": {"L1": {"timeout_s": -1}}},
    ],
)
def test_unsafe_values_are_refused(values: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        LLMSettings.model_validate(values)


def test_a_local_models_profile_carries_bounds_a_small_cpu_can_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in ("TIMEOUT_S", "MAX_TOKENS", "L1_MAX_TOKENS", "STRUCTURED"):
        monkeypatch.delenv(f"STRATAMEM_LLM_{name}", raising=False)
    hosted = LLMSettings(base_url="http://h/v1", model="m").for_stage("L1")
    assert (hosted.timeout_s, hosted.max_tokens) == (60.0, 2048)
    for profile in ("llamacpp", "ollama"):
        local = LLMSettings(base_url="http://h/v1", model="m", structured=profile)
        assert (local.for_stage("L1").timeout_s, local.for_stage("L1").max_tokens) == (600.0, 512)
        assert local.for_stage("offload-l15").max_tokens == 128
    set_by_hand = LLMSettings(base_url="http://h/v1", model="m", structured="llamacpp",
                              timeout_s=90, max_tokens=300)  # fmt: skip
    assert (set_by_hand.for_stage("L2").timeout_s, set_by_hand.for_stage("L2").max_tokens) == (
        90.0, 300,
    )  # fmt: skip
    monkeypatch.setenv("STRATAMEM_LLM_STRUCTURED", "llamacpp")
    monkeypatch.setenv("STRATAMEM_LLM_TIMEOUT_S", "120")
    from_env = LLMSettings(base_url="http://h/v1", model="m")
    assert (from_env.for_stage("L1").timeout_s, from_env.for_stage("L1").max_tokens) == (120.0, 512)
