"""What the routes share: the memory, tenants, pipeline, settings and metrics of one process."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stratamem.api.limits import TenantLimits
from stratamem.api.metrics import Metrics
from stratamem.api.settings import ServerSettings
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope as TenantScope
from stratamem.errors import ConfigError, PipelineError
from stratamem.failures import Failures
from stratamem.llm.usage import UsageMeter
from stratamem.offload import Offload
from stratamem.offload.executors import PipelineScheduler
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.runner import open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.proxy.deps import ProxyDeps
from stratamem.proxy.service import MemoryProxy
from stratamem.proxy.settings import ProxySettings
from stratamem.runtime import offload_of
from stratamem.store.layers.port import LayerStore
from stratamem.store.tenants.port import TenantStore


@dataclass
class Services:
    memory: AsyncMemory
    tenants: TenantStore
    settings: ServerSettings
    pipeline: PipelineBackend | None = None
    offload: Offload | None = None
    metrics: Metrics = field(default_factory=Metrics)
    pipeline_settings: PipelineSettings = field(default_factory=PipelineSettings)
    monotonic: Callable[[], float] = time.perf_counter
    proxy_settings: ProxySettings = field(default_factory=ProxySettings)
    limits: TenantLimits = field(init=False)
    proxy: MemoryProxy = field(init=False)
    """The OpenAI-compatible memory proxy (`/openai/v1`)."""
    stopped: str | None = field(default=None, init=False)
    """Why this process's pipeline work stopped, when its worker or scheduler ended by an
    error (`api.background`): `/v1/ready` then answers 503 saying so."""

    def __post_init__(self) -> None:
        self.limits = limits_of(self.settings, self.monotonic)
        deps = ProxyDeps(self.memory, self.offload, self.proxy_settings, self.metrics.count,
                         self.check_pending)  # fmt: skip
        self.proxy = MemoryProxy(deps)

    @classmethod
    def over(
        cls,
        memory: AsyncMemory,
        settings: ServerSettings,
        pipeline: PipelineBackend | None = None,
        pipeline_settings: PipelineSettings | None = None,
        proxy_settings: ProxySettings | None = None,
    ) -> Services:
        """Services over an open memory whose store is a SQLite or PostgreSQL store; context
        offload runs its stages on the pipeline, so it is there only with one."""
        if memory.stores is None:
            raise ConfigError("the service keeps tenants in a SQLite or PostgreSQL store")
        offload = None
        if pipeline is not None:
            offload = offload_of(memory, PipelineScheduler(pipeline, memory.clock))
        return cls(memory, memory.stores.tenants(memory.clock), settings, pipeline, offload,
                   pipeline_settings=pipeline_settings or PipelineSettings(),
                   proxy_settings=proxy_settings or ProxySettings())  # fmt: skip

    @classmethod
    def open(
        cls, core: Settings, settings: ServerSettings, pipeline: PipelineSettings
    ) -> Services:
        """The memory and the pipeline backend named by the settings."""
        memory = AsyncMemory.open(core)
        try:
            return cls.over(memory, settings, open_backend(pipeline, core.data_dir), pipeline)
        except (ConfigError, PipelineError):
            memory.store.close()
            raise

    def admit(self, tenant: str, body_bytes: int) -> None:
        """Count a request of `tenant` against its limits (`TenantThrottled` when over)."""
        self.limits.admit(tenant, body_bytes)

    async def check_pending(self, tenant: str) -> None:
        """Refuse a capture while too many of `tenant`'s records wait for a vector."""
        if not self.limits.pending_embeddings or self.memory.embedder is None:
            return
        scope = TenantScope(tenant)
        pending = await asyncio.to_thread(self.memory.store.count_pending_embeddings, scope)
        self.limits.check_pending(pending)

    @property
    def layers(self) -> LayerStore:
        if self.memory.layers is None:
            raise ConfigError("the memory layers need the embedded (SQLite) store")
        return self.memory.layers

    @property
    def failures(self) -> Failures:
        """The failure records of the LLM stages, and their retry."""
        return Failures(self.memory.layer_service(), self.offload)

    @property
    def llm_usage(self) -> UsageMeter | None:
        """The usage meter of this process's LLM client (None in offline mode)."""
        return None if self.memory.llm is None else self.memory.llm.usage

    def require_offload(self) -> Offload:
        if self.offload is None:
            raise PipelineError("context offload needs the pipeline, and this service has none")
        return self.offload

    def require_pipeline(self) -> PipelineBackend:
        if self.pipeline is None:
            raise PipelineError("this service runs without a pipeline backend")
        return self.pipeline

    async def aclose(self) -> None:
        await self.proxy.aclose()  # first: its captures still running need the store
        if self.pipeline is not None:
            await self.pipeline.close()
        await self.memory.aclose()


def limits_of(settings: ServerSettings, monotonic: Callable[[], float]) -> TenantLimits:
    return TenantLimits(
        requests_per_s=settings.tenant_requests_per_s,
        request_burst=settings.tenant_request_burst,
        bytes_per_s=settings.tenant_bytes_per_s,
        byte_burst=settings.tenant_byte_burst,
        pending_embeddings=settings.tenant_pending_embeddings,
        monotonic=monotonic,
    )
