"""Settings of the service (`STRATAMEM_SERVER_*`), and loading both settings classes at start.

Sources, strongest first: command-line options, environment variables, the config file (TOML:
core settings at the top level, service settings in a `[server]` table, pipeline settings in a
`[pipeline]` table), defaults. Every problem is reported at start as a `ConfigError` naming the
variable to fix.
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from pathlib import Path
from typing import Annotated, Any, NamedTuple, TypeVar

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from stratamem.config import ENV_PREFIX as CORE_ENV_PREFIX
from stratamem.config import Settings, explain_invalid
from stratamem.errors import ConfigError
from stratamem.layers.settings import LayerSettings
from stratamem.llm.settings import ENV_PREFIX as LLM_ENV_PREFIX
from stratamem.llm.settings import LLMSettings
from stratamem.pipeline.settings import PipelineSettings
from stratamem.proxy.settings import ENV_PREFIX as PROXY_ENV_PREFIX
from stratamem.proxy.settings import ProxySettings

ENV_PREFIX = "STRATAMEM_SERVER_"
PIPELINE_ENV_PREFIX = "STRATAMEM_PIPELINE_"
LAYERS_ENV_PREFIX = "STRATAMEM_LAYERS_"
MIN_ADMIN_KEY_CHARS = 32
_ORIGIN = re.compile(r"^https?://[A-Za-z0-9.\-\[\]:]+$")
_GENERATE_KEY = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"

S = TypeVar("S", bound=BaseSettings)


class ServerSettings(BaseSettings):
    """The HTTP service. Each field can be set as `STRATAMEM_SERVER_<NAME>`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    host: str = Field("127.0.0.1", min_length=1, description="Interface to listen on.")
    port: int = Field(8420, ge=0, le=65535, description="TCP port (0: any free port).")
    admin_key: SecretStr | None = Field(
        None,
        description="Key of the admin routes (tenants, keys); admin routes are off without it.",
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="Origins browsers may call from, comma-separated; CORS is off when empty.",
    )
    max_body_bytes: int = Field(
        1_048_576, ge=1024, le=64 * 1_048_576, description="Largest request body (else 413)."
    )
    workers: int = Field(
        2, ge=0, le=256, description="Pipeline consumers inside `serve` (0: API only)."
    )
    processes: int = Field(
        1, ge=1, le=64, description="API processes `serve` runs on the one port (each its own"
        " event loop and store connection; the pipeline consumers and the embedding catch-up run"
        " in the first only).",
    )
    body_timeout_s: float = Field(
        30.0, gt=0, le=3600, description="Longest wait for a request body to arrive (else 408)."
    )
    max_connections: int = Field(
        1000, ge=1, le=1_000_000, description="Connections open at once; a new one over the bound"
        " takes the place of the idlest, or gets 503 when every one has a request in flight.",
    )
    header_timeout_s: float = Field(
        10.0, gt=0, le=3600, description="Longest wait for a request's headers to arrive whole"
        " (from the connection's opening, or a later request's first byte); then it is closed.",
    )
    keep_alive_timeout_s: int = Field(
        5, ge=1, le=3600, description="A kept-alive connection that sends no new request for"
        " this long is closed.",
    )
    shutdown_timeout_s: int = Field(
        20, ge=1, le=3600, description="At SIGTERM / SIGINT, longest wait for the requests in"
        " flight and the workers' running tasks, together (it caps the pipeline's grace period);"
        " then both are cancelled (their work stays owed) and the process exits.",
    )
    tenant_requests_per_s: float = Field(
        100.0, ge=0, description="Requests a second per tenant, on average (0: no limit; 429)."
    )
    tenant_request_burst: int = Field(
        200, ge=1, description="Requests a tenant may send at once after a quiet spell."
    )
    tenant_bytes_per_s: int = Field(
        4 * 1_048_576, ge=0, description="Request-body bytes a second per tenant (0: no limit)."
    )
    tenant_byte_burst: int = Field(
        16 * 1_048_576, ge=1024, description="Body bytes a tenant may send at once."
    )
    tenant_pending_embeddings: int = Field(
        50_000, ge=0, description="Records of a tenant waiting for a vector above which"
        " captures are refused with 429 until the background catches up (0: no limit).",
    )

    @field_validator("admin_key")
    @classmethod
    def _admin_key_is_long(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and len(value.get_secret_value()) < MIN_ADMIN_KEY_CHARS:
            raise ValueError(
                f"use at least {MIN_ADMIN_KEY_CHARS} random characters, e.g. from"
                f" `{_GENERATE_KEY}`"
            )
        return value

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, value: object) -> object:
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("cors_origins")
    @classmethod
    def _origins_are_explicit(cls, value: list[str]) -> list[str]:
        for origin in value:
            if not _ORIGIN.match(origin):
                raise ValueError(
                    f"{origin!r} is not an origin: list each one as scheme://host[:port]"
                    " (a wildcard is not accepted)"
                )
        return value


class AllSettings(NamedTuple):
    core: Settings
    server: ServerSettings
    pipeline: PipelineSettings


def load_settings(
    config_file: Path | None = None,
    core: dict[str, Any] | None = None,
    server: dict[str, Any] | None = None,
) -> AllSettings:
    """Every settings class `serve` needs, validated; raises `ConfigError` saying what to fix."""
    file_values = _read_config(config_file) if config_file else {}
    tables = {name: _table(file_values, name, config_file) for name in ("server", "pipeline")}
    _check_core_keys(file_values, config_file)
    env_only: tuple[tuple[type[BaseSettings], str], ...] = (
        (LLMSettings, LLM_ENV_PREFIX), (LayerSettings, LAYERS_ENV_PREFIX),
        (ProxySettings, PROXY_ENV_PREFIX),
    )  # fmt: skip
    for cls, prefix in env_only:
        _build(cls, prefix, {}, {}, None)  # read again when the services open: fail here
    return AllSettings(
        _build(Settings, CORE_ENV_PREFIX, file_values, core or {}, config_file),
        _build(ServerSettings, ENV_PREFIX, tables["server"], server or {}, config_file),
        _build(PipelineSettings, PIPELINE_ENV_PREFIX, tables["pipeline"], {}, config_file),
    )


def _table(values: dict[str, Any], name: str, config_file: Path | None) -> dict[str, Any]:
    table = values.pop(name, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{config_file}: [{name}] must be a table")
    return table


def _check_core_keys(values: dict[str, Any], config_file: Path | None) -> None:
    """The config file's top level holds core settings only: another key is a mistake (the
    core settings would ignore it), named with the nearest setting."""
    unknown = sorted(set(values) - set(Settings.model_fields))
    if not unknown:
        return
    lines = []
    for key in unknown:
        near = difflib.get_close_matches(key, Settings.model_fields, n=1, cutoff=0.75)
        hint = f" (did you mean `{near[0]}`?)" if near else ""
        lines.append(f"`{key}` is not a setting{hint}")
    raise ConfigError(
        f"{config_file}: " + "; ".join(lines) + ". The top level holds the core settings, and"
        " [server] and [pipeline] their own; the LLM, layer and offload settings are read from"
        " the environment only (STRATAMEM_LLM_*, STRATAMEM_LAYERS_*, STRATAMEM_OFFLOAD_*)"
    )


def _read_config(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"the config file {path} is not valid TOML: {exc}") from exc


def _build(
    cls: type[S],
    prefix: str,
    file_values: dict[str, Any],
    overrides: dict[str, Any],
    config_file: Path | None,
) -> S:
    """Overrides > environment > file > defaults: file values the environment sets are dropped."""
    in_env = {name.upper() for name in os.environ}
    values = {k: v for k, v in file_values.items() if f"{prefix}{k}".upper() not in in_env}
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return cls(**values)
    except ValidationError as exc:
        raise ConfigError(explain_invalid(exc, prefix, config_file)) from exc
    except ConfigError as exc:  # a cross-field check of the settings class itself
        raise ConfigError(f"invalid {prefix}* settings: {exc}") from exc

