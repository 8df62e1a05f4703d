"""Settings of the pipeline and its worker, from env `STRATAMEM_PIPELINE_*`."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from stratamem.errors import ConfigError


class LockScope(StrEnum):
    SESSION = "session"  # L1, L2, flush lock their session; L3 locks its tenant
    TENANT = "tenant"  # every locked type locks its tenant


class PipelineSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATAMEM_PIPELINE_", extra="forbid")

    backend: Literal["sqlite", "redis"] = "sqlite"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "stratamem:pipeline:"

    concurrency: int = Field(default=4, ge=1, le=256)
    consume_block_ms: int = Field(default=1000, ge=1)

    lock_scope: LockScope = LockScope.SESSION
    lock_ttl_ms: int = Field(default=30_000, ge=100)
    # On a lock conflict, wait with backoff (initial, times factor, capped) for at most this long,
    # then drop and ack the task. None: wait until one lock TTL has passed.
    lock_wait_max_s: float | None = Field(default=None, ge=0)
    lock_backoff_initial_s: float = Field(default=0.2, gt=0)
    lock_backoff_factor: float = Field(default=3.0, ge=1)
    lock_backoff_cap_s: float = Field(default=5.0, gt=0)

    retry_limit: int = Field(default=3, ge=0)
    retry_backoff_base_s: float = Field(default=5.0, ge=0)
    retry_backoff_factor: float = Field(default=3.0, ge=1)

    reclaim_idle_ms: int = Field(default=60_000, ge=100)
    reclaim_interval_s: float = Field(default=5.0, gt=0)
    max_deliveries: int = Field(default=5, ge=1)

    pump_interval_s: float = Field(default=1.0, gt=0)
    pump_batch: int = Field(default=100, ge=1)

    grace_period_s: float = Field(default=30.0, ge=0)
    # A worker status that is stopped or unresponsive for longer than this is no longer listed
    # (and is deleted by the next worker that publishes): dead workers do not stay forever.
    worker_status_expiry_s: float = Field(default=3600.0, gt=0)

    # Cascade: after L1 / flush, the session's L2 timer is moved to at most now + l2_delay_s
    # (at once after l2_batch L1 completions); after L2, the max-interval timer is armed.
    l2_delay_s: float = Field(default=60.0, ge=0)
    l2_batch: int = Field(default=5, ge=1)
    l2_max_interval_s: float = Field(default=3600.0, gt=0)

    @model_validator(mode="after")
    def _consistent(self) -> PipelineSettings:
        # Live workers heartbeat their deliveries every quarter TTL while running and after
        # every lock backoff while waiting: both must come well within the reclaim threshold.
        longest_silence_ms = max(self.lock_ttl_ms / 4, self.lock_backoff_cap_s * 1000)
        if self.reclaim_idle_ms <= longest_silence_ms:
            raise ConfigError(
                f"reclaim_idle_ms ({self.reclaim_idle_ms}) must exceed both a quarter of "
                f"lock_ttl_ms and lock_backoff_cap_s ({longest_silence_ms:.0f} ms), or tasks "
                "of live workers are reclaimed"
            )
        return self

    @property
    def lock_wait_s(self) -> float:
        return self.lock_ttl_ms / 1000 if self.lock_wait_max_s is None else self.lock_wait_max_s

    @property
    def heartbeat_s(self) -> float:
        return self.lock_ttl_ms / 4000

    def retry_delay_s(self, attempt: int) -> float:
        """Backoff before re-running a task whose attempt number `attempt` failed (0-based)."""
        return self.retry_backoff_base_s * self.retry_backoff_factor**attempt
