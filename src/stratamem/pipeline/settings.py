"""Settings of the pipeline and its worker, from env `STRATAMEM_PIPELINE_*`."""

from __future__ import annotations

from enum import StrEnum
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from stratamem.errors import ConfigError

#: The shortest retention of the execution log and receipts (`log_retention_s`) but 0.
MIN_LOG_RETENTION_S = 3600.0


class LockScope(StrEnum):
    SESSION = "session"  # each type's lock as its rule says (`task_type.LockRule`)
    TENANT = "tenant"  # every type whose rule widens locks its tenant instead


class PipelineSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="STRATAMEM_PIPELINE_", extra="forbid")

    backend: Literal["sqlite", "redis"] = "sqlite"
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = "stratamem:pipeline:"

    concurrency: int = Field(default=4, ge=1, le=256)
    consume_block_ms: int = Field(default=1000, ge=1)

    lock_scope: LockScope = LockScope.SESSION
    # 120 s: a lock is held for one stage, whose slowest part is one LLM call (a local model
    # writing a long reply takes a minute or more); a task that meets the lock waits one TTL,
    # so it outwaits such a call instead of being dropped behind it. A dead holder's lock
    # blocks its key for at most this long (renewal every quarter keeps a live one).
    lock_ttl_ms: int = Field(default=120_000, ge=100)
    # On a lock conflict, wait with backoff (initial, times factor, capped) for at most this long,
    # then drop and ack the task (the backlog scheduler finds its work again in the store).
    # None: wait until one lock TTL has passed.
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

    grace_period_s: float = Field(default=20.0, ge=0)
    # A worker status that is stopped or unresponsive for longer than this is no longer listed
    # (and is deleted by the next worker that publishes): dead workers do not stay forever.
    worker_status_expiry_s: float = Field(default=3600.0, gt=0)

    # Cascade: after L1 / flush, the session's L2 timer is moved to at most now + l2_delay_s
    # (at once after l2_batch L1 completions); after L2, the max-interval timer is armed.
    l2_delay_s: float = Field(default=60.0, ge=0)
    l2_batch: int = Field(default=5, ge=1)
    l2_max_interval_s: float = Field(default=3600.0, gt=0)

    # The backlog scheduler (`pipeline.scheduler`): it keeps up to `scheduler_limit` tasks of
    # each kind queued (ready or in flight) from owed work it finds in the store; 0 turns it off.
    scheduler_limit: int = Field(default=8, ge=0)
    scheduler_interval_s: float = Field(default=1.0, gt=0)
    # The lease of each kind's one active scheduler, renewed once a third of it passed: when
    # its holder dies (or a lone `serve` restarts), another process with that kind takes over
    # after at most this long.
    scheduler_lease_ms: int = Field(default=15_000, ge=100)
    # A submitted key whose work shows no progress for this long (one lock TTL by default: a
    # task dropped on a lock left by a dead worker) is resubmitted after a backoff (initial,
    # doubling, capped); progress resets the backoff.
    scheduler_in_flight_s: float = Field(default=120.0, gt=0)
    scheduler_backoff_initial_s: float = Field(default=30.0, ge=0)
    scheduler_backoff_cap_s: float = Field(default=900.0, ge=0)
    # Owed work younger than this is left to the path that made it (timers, cascade, ingest).
    scheduler_grace_s: float = Field(default=60.0, ge=0)
    scheduler_pages_per_pass: int = Field(default=8, ge=1)
    scheduler_park_refresh_s: float = Field(default=30.0, ge=0)
    scheduler_dead_scan: int = Field(default=10_000, ge=1)

    # Retention of the execution log and receipts (`pipeline.retention`), run by the scheduler's
    # loop: ended executions and receipts older than this go, unless their task is still
    # queued, in flight, waiting for a retry or dead. 0 keeps them for ever; otherwise at least
    # an hour (a receipt must outlive every retry and lock wait of its task).
    log_retention_s: float = Field(default=7 * 86_400.0, ge=0)
    log_prune_interval_s: float = Field(default=300.0, gt=0)
    # Rows a batch reads and deletes (one short write transaction), and batches per table a pass.
    log_prune_batch: int = Field(default=500, ge=1, le=1000)
    log_prune_batches: int = Field(default=10, ge=1)
    # A pass reads up to this many queued tasks and dead letters to know which tasks are held;
    # with more, it cannot tell and deletes nothing.
    log_prune_scan: int = Field(default=10_000, ge=1)

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
        if self.scheduler_lease_ms <= 2000 * self.scheduler_interval_s:
            raise ConfigError(
                f"scheduler_lease_ms ({self.scheduler_lease_ms}) must exceed two scheduler"
                f" intervals ({2000 * self.scheduler_interval_s:.0f} ms), or the lease lapses"
                " between the passes that renew it"
            )
        if 0 < self.log_retention_s < MIN_LOG_RETENTION_S:
            raise ConfigError(
                f"log_retention_s ({self.log_retention_s:g}) must be 0 (keep for ever) or at"
                f" least {MIN_LOG_RETENTION_S:g} s: a task's receipt must outlive its retries"
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
