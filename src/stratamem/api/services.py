"""What the routes share: the memory, the tenants, the settings and the metrics of one process."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from stratamem.api.metrics import Metrics
from stratamem.api.settings import ServerSettings
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.errors import ConfigError
from stratamem.store.sqlite import SqliteStore
from stratamem.store.sqlite.tenants import TenantStore


@dataclass
class Services:
    memory: AsyncMemory
    tenants: TenantStore
    settings: ServerSettings
    metrics: Metrics = field(default_factory=Metrics)
    monotonic: Callable[[], float] = time.perf_counter

    @classmethod
    def over(cls, memory: AsyncMemory, settings: ServerSettings) -> Services:
        """Services over an open memory whose store is the embedded SQLite store."""
        if not isinstance(memory.store, SqliteStore):
            raise ConfigError("the service keeps tenants in the embedded SQLite store")
        return cls(memory, TenantStore(memory.store, memory.clock), settings)

    @classmethod
    def open(cls, core: Settings, settings: ServerSettings) -> Services:
        return cls.over(AsyncMemory.open(core), settings)

    async def aclose(self) -> None:
        await self.memory.aclose()
