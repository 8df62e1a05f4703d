"""Settings of the memory proxy (`STRATAMEM_PROXY_*`, environment only, like the LLM's: the
upstream key is a secret that belongs in the environment, not in a config file)."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from stratamem.httpretry import redact_url

ENV_PREFIX = "STRATAMEM_PROXY_"


class ProxySettings(BaseSettings):
    """The OpenAI-compatible memory proxy that `serve` answers at `/openai/v1`."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    upstream: str | None = Field(
        None, description="Base URL of the model the proxy forwards to, including `/v1`."
    )
    upstream_key: SecretStr | None = Field(
        None, description="The upstream's API key (never the tenant's stratamem key)."
    )
    anthropic_upstream: str | None = Field(
        None, description="Base URL of the Anthropic messages API the proxy forwards"
        " `/anthropic/v1/messages` to, including `/v1`.",
    )
    anthropic_upstream_key: SecretStr | None = Field(
        None, description="That upstream's API key (sent as `x-api-key`)."
    )
    session: str | None = Field(
        None, description="Session of calls without `X-Stratamem-Session` (unset: one session"
        " per conversation, named after its first user message).",
    )
    recall_timeout_s: float = Field(
        1.0, gt=0, le=60, description="A recall (or compaction) slower than this is skipped."
    )
    budget_tokens: int = Field(
        100_000, ge=0, description="Context budget compaction fits a conversation into"
        " (0: no compaction); a request may set its own with `X-Stratamem-Budget-Tokens`.",
    )
    upstream_timeout_s: float = Field(
        600.0, gt=0, description="Longest wait for the upstream's answer (or its next chunk)."
    )
    max_body_bytes: int = Field(
        32 * 1_048_576, ge=1024, le=512 * 1_048_576,
        description="Largest request body of the proxy's routes (conversations are long).",
    )  # fmt: skip

    @field_validator("upstream", "anthropic_upstream")
    @classmethod
    def _check_upstream(cls, value: str | None) -> str | None:
        if not value:
            return None
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"{redact_url(value)} is not an http:// or https:// base URL")
        return value.rstrip("/")

