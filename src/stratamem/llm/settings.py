"""LLM endpoint settings, with per-stage overrides, from `STRATAMEM_LLM_*` environment variables.

    STRATAMEM_LLM_BASE_URL=http://127.0.0.1:8000/v1   # the API root, including /v1
    STRATAMEM_LLM_API_KEY=...                          # optional
    STRATAMEM_LLM_MODEL=qwen2.5-7b-instruct
    STRATAMEM_LLM_L1_MODEL=qwen2.5-14b-instruct        # stage L1 uses another model
    STRATAMEM_LLM_OFFLOAD_L15_TIMEOUT_S=20             # stage offload-l15 gets a shorter timeout

    STRATAMEM_LLM_STRUCTURED=llamacpp                  # how to ask for JSON (default: auto)
    STRATAMEM_LLM_L2_MAX_TOKENS=3000                   # longest reply of stage L2

A stage override is `STRATAMEM_LLM_<STAGE>_<FIELD>` with FIELD one of BASE_URL, API_KEY, MODEL,
TIMEOUT_S, TEMPERATURE, MAX_TOKENS; the stage name is upper-cased with `-` and `.` written as `_`.

Every call carries `max_tokens`: the call's own bound where the code gives one, else the stage's
setting, else `STRATAMEM_LLM_MAX_TOKENS`, else the stage's default (`STAGE_MAX_TOKENS`; with the
`llamacpp` or `ollama` profile, a small local model's `LOCAL_MAX_TOKENS`), else
`DEFAULT_MAX_TOKENS`. Those two profiles also wait `LOCAL_TIMEOUT_S` for a call unless
`STRATAMEM_LLM_TIMEOUT_S` is set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from stratamem.errors import ConfigError

ENV_PREFIX = "STRATAMEM_LLM_"
Structured = Literal["auto", "openai", "llamacpp", "ollama", "prompt"]

DEFAULT_MAX_TOKENS = 1024
STAGE_MAX_TOKENS: dict[str, int] = {
    "l1": 2048,  # up to max_memories_per_batch memories of a batch of turns
    "l1_reconcile": 1024,  # one decision per proposed memory
    "l2": 2048,  # scene operations, each scene body up to max_scene_chars
    "l3": 768,  # one profile of up to max_profile_chars
    "offload_l1": 2048,  # a summary and a score per tool call of the chunk
    "offload_l15": 256,  # four fields
    "offload_l2": 2048,  # diagram edits (up to diagram_max_chars) and the call mapping
}
"""The longest reply of each stage, in tokens, unless set (a reply cut off at the bound is never
read: the stage retries with a smaller batch)."""

LOCAL_TIMEOUT_S = 600.0
LOCAL_MAX_TOKENS: dict[str, int] = {
    "l1": 512,  # a handful of memories: a small model's batch is a few turns
    "l1_reconcile": 384,
    "l2": 768,
    "l3": 384,
    "offload_l1": 512,
    "offload_l15": 128,
    "offload_l2": 768,
}
"""The bounds of a small local model (the `llamacpp` and `ollama` profiles), unless set: on a
2-core CPU a 0.1-3B model writes some 5-50 tokens a second, so a call must stop early and be
waited for longer (llama.cpp keeps generating after a client gives up: a timeout only piles
work up behind it)."""
LOCAL_PROFILES = frozenset({"llamacpp", "ollama"})


def stage_key(stage: str) -> str:
    """The normalised form of a stage name: `offload-l15` → `offload_l15`."""
    return stage.strip().lower().replace("-", "_").replace(".", "_")


def _check_url(value: str | None) -> str | None:
    if value is not None and not value.startswith(("http://", "https://")):
        raise ValueError(f"base_url {value!r} must start with http:// or https://")
    return value.rstrip("/") if value else value


class StageSettings(BaseModel):
    """Overrides for one stage; unset fields fall back to the top-level settings."""

    base_url: str | None = None
    api_key: SecretStr | None = None
    model: str | None = None
    timeout_s: float | None = Field(default=None, gt=0)
    temperature: float | None = Field(default=None, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=16, le=1_000_000)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        return _check_url(value)


@dataclass(frozen=True, slots=True)
class StageConfig:
    """What one stage's calls use, overrides resolved."""

    stage: str
    base_url: str
    model: str
    api_key: str | None
    timeout_s: float
    temperature: float | None
    max_tokens: int


class LLMSettings(BaseSettings):
    """Endpoint, model and behaviour of LLM calls; see the module doc for the variables."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    base_url: str | None = Field(default=None, description="API root including /v1.")
    api_key: SecretStr | None = Field(
        default=None, description="Bearer key, if the endpoint needs one."
    )
    model: str | None = Field(default=None, description="Chat model name.")
    timeout_s: float = Field(default=60.0, gt=0, le=3600, description="Per-request timeout.")
    temperature: float | None = Field(
        default=0.0, ge=0, le=2, description="None leaves it to the server."
    )
    max_attempts: int = Field(
        default=4, ge=1, le=10, description="Requests per call, retries included."
    )
    retry_base_delay_s: float = Field(
        default=1.0, ge=0, description="First backoff without Retry-After."
    )
    max_retry_delay_s: float = Field(
        default=60.0, ge=0, description="Longest single wait before a retry."
    )
    json_schema: bool = Field(
        default=True,
        description="Ask for structured JSON at all (false: as `structured=prompt`).",
    )
    structured: Structured = Field(
        default="auto",
        description="How JSON replies are asked for: `openai` (response_format json_schema),"
        " `llamacpp` (response_format json_object with a schema), `ollama` (a `format` field),"
        " `prompt` (the schema in the system prompt only), or `auto`: openai, then on a refusal"
        " llamacpp, then prompt, learned per endpoint and model for the life of the process.",
    )
    max_tokens: int | None = Field(
        default=None,
        ge=16,
        le=1_000_000,
        description="Longest reply of every stage without its own setting (unset: each"
        " stage's default).",
    )
    breaker_failures: int = Field(
        default=5,
        ge=1,
        le=1000,
        description="Consecutive calls in endpoint trouble (transport failures, timeouts, HTTP"
        " 500/502/503/504) that open an endpoint's circuit breaker (calls then fail at once;"
        " pipeline tasks wait without spending attempts either way).",
    )
    breaker_cooldown_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="How long an open breaker refuses calls before one probe call is let through"
        " (and how long work waits after endpoint trouble).",
    )
    stages: dict[str, StageSettings] = Field(default_factory=dict)

    @field_validator("base_url")
    @classmethod
    def _check_base_url(cls, value: str | None) -> str | None:
        return _check_url(value)

    @field_validator("stages")
    @classmethod
    def _normalise_stage_names(cls, value: dict[str, StageSettings]) -> dict[str, StageSettings]:
        return {stage_key(name): overrides for name, overrides in value.items()}

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        stage_env = _StageEnvSource(settings_cls)
        return init_settings, env_settings, stage_env, dotenv_settings, file_secret_settings

    @property
    def configured(self) -> bool:
        """Whether a default endpoint and model are set (otherwise the offline mode runs)."""
        return bool(self.base_url and self.model)

    def for_stage(self, stage: str) -> StageConfig:
        """The resolved settings of `stage`; raises `ConfigError` if endpoint or model is unset."""
        over = self.stages.get(stage_key(stage), StageSettings())
        base_url = over.base_url or self.base_url
        model = over.model or self.model
        if not base_url or not model:
            variable = f"{ENV_PREFIX}{stage_key(stage).upper()}"
            raise ConfigError(
                f"no LLM endpoint for stage {stage!r}: set {ENV_PREFIX}BASE_URL and "
                f"{ENV_PREFIX}MODEL (or {variable}_BASE_URL and {variable}_MODEL)"
            )
        key = over.api_key or self.api_key
        name = stage_key(stage)
        local = self.structured_profile in LOCAL_PROFILES
        timeout = self.timeout_s
        if local and "timeout_s" not in self.model_fields_set:
            timeout = LOCAL_TIMEOUT_S
        defaults = LOCAL_MAX_TOKENS if local else STAGE_MAX_TOKENS
        return StageConfig(
            stage=stage,
            base_url=base_url,
            model=model,
            api_key=key.get_secret_value() if key else None,
            timeout_s=over.timeout_s or timeout,
            temperature=over.temperature if over.temperature is not None else self.temperature,
            max_tokens=over.max_tokens
            or self.max_tokens
            or defaults.get(name, DEFAULT_MAX_TOKENS),
        )

    @property
    def structured_profile(self) -> Structured:
        """The configured profile (`prompt` when `json_schema` is off)."""
        return self.structured if self.json_schema else "prompt"


_STAGE_FIELDS = sorted(StageSettings.model_fields, key=len, reverse=True)


class _StageEnvSource(PydanticBaseSettingsSource):
    """Reads `STRATAMEM_LLM_<STAGE>_<FIELD>` variables into `stages`."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # everything is produced by __call__

    def __call__(self) -> dict[str, Any]:
        stages: dict[str, dict[str, str]] = {}
        top_level = {name.upper() for name in LLMSettings.model_fields}
        for name, value in os.environ.items():
            upper = name.upper()
            if not upper.startswith(ENV_PREFIX):
                continue
            rest = upper[len(ENV_PREFIX) :]
            if rest in top_level:
                continue
            found = split_stage(rest)
            if found is not None:
                stages.setdefault(found[0], {})[found[1]] = value
        return {"stages": stages} if stages else {}


def split_stage(rest: str) -> tuple[str, str] | None:
    """`L1_BASE_URL` → (`l1`, `base_url`); None when no stage field ends the name."""
    for field in _STAGE_FIELDS:
        suffix = "_" + field.upper()
        if rest.endswith(suffix) and len(rest) > len(suffix):
            return stage_key(rest[: -len(suffix)]), field
    return None
