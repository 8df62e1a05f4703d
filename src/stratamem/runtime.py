"""The wiring, once: what a process builds from its settings to run the system.

The memory (store, embedder, LLM) is the library's `AsyncMemory.open`, which takes its stores
from `store.opening.stores_of` (as the service, these factories and the CLI do) and builds the
layers over them; over a memory, this module builds context offload (`offload_of`) and
the registry of executors every task type runs with (`registry_of`: the memory layers' and
offload's, with their backlog sources and the layers' cascade). `stratamem serve`
(`api.services`, `api.background`), `stratamem worker` (its `--executors` factories below) and
the CLI's commands build from these; the `layers`, `offload` and `pipeline` packages never
reach back up for the memory themselves (`tests/test_layout.py`).
"""

from __future__ import annotations

from stratamem.clock import SystemClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.errors import ConfigError
from stratamem.llm import LLMClient, LLMSettings
from stratamem.offload.executors import PipelineScheduler, register_executors
from stratamem.offload.facade import Offload
from stratamem.offload.schedule import Scheduler
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ExecutorRegistry
from stratamem.pipeline.runner import open_backend
from stratamem.pipeline.settings import PipelineSettings
from stratamem.store.opening import open_stores


def offload_of(memory: AsyncMemory, scheduler: Scheduler) -> Offload:
    """Context offload over `memory`'s store, LLM and clock, its stages run by `scheduler` (the
    pipeline's, or an in-process runner)."""
    if memory.stores is None:
        raise ConfigError("context offload keeps its records in a SQLite or PostgreSQL store")
    return Offload(memory.stores.offload, scheduler, llm=memory.llm, clock=memory.clock)


def registry_of(
    memory: AsyncMemory, backend: PipelineBackend, offload: Offload | None = None
) -> ExecutorRegistry:
    """The executors and backlog sources of the memory layers over `memory`, and of `offload`
    when given (`backend` re-arms the layers' early L2 timers)."""
    registry = memory.layer_executors(backend).registry()
    if offload is not None:
        register_executors(registry, offload)
    return registry


def worker_registry() -> ExecutorRegistry:
    """For `stratamem worker --executors stratamem.runtime:worker_registry` (its default): every
    task type `serve` runs, over the store, LLM and pipeline the `STRATAMEM_*` variables
    configure. The store and clients live as long as the worker process."""
    memory = AsyncMemory.open()
    backend = open_backend(PipelineSettings(), memory.settings.data_dir)
    offload = offload_of(memory, PipelineScheduler(backend, memory.clock))
    return registry_of(memory, backend, offload)


def layer_registry() -> ExecutorRegistry:
    """For `stratamem worker --executors stratamem.runtime:layer_registry`: the memory layers
    only (`L1`, `L2`, `L3`, `flush`), over the store, embedder and LLM configured by
    `STRATAMEM_*` variables (offline mode without an LLM endpoint)."""
    memory = AsyncMemory.open()
    return registry_of(memory, open_backend(PipelineSettings(), memory.settings.data_dir))


def offload_registry() -> ExecutorRegistry:
    """For `stratamem worker --executors stratamem.runtime:offload_registry`: context offload
    only, over the store under `STRATAMEM_DATA_DIR`, the pipeline of `STRATAMEM_PIPELINE_*`
    (follow-ups and timers), the LLM of `STRATAMEM_LLM_*` (offline mode without one) and
    `STRATAMEM_OFFLOAD_*`; no embedder is loaded."""
    settings, clock = Settings(), SystemClock()
    backend = open_backend(PipelineSettings(), settings.data_dir)
    llm_settings = LLMSettings()
    llm = LLMClient(llm_settings, clock=clock) if llm_settings.configured else None
    store = open_stores(settings).offload
    offload = Offload(store, PipelineScheduler(backend, clock), llm=llm, clock=clock)
    registry = ExecutorRegistry()
    register_executors(registry, offload)
    return registry
