"""The durable task pipeline: one backend contract (SQLite, Redis), the worker, the timer pump.

Backends are imported from their modules (`stratamem.pipeline.sqlite_backend`,
`stratamem.pipeline.redis_backend`, which needs the `redis` extra)."""

from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.errors import RetryLater
from stratamem.pipeline.executors import (
    ExecResult,
    ExecutionContext,
    Executor,
    ExecutorRegistry,
)
from stratamem.pipeline.fencing import fence_check
from stratamem.pipeline.settings import LockScope, PipelineSettings
from stratamem.pipeline.task import DeadLetter, Delivery, LockGrant, QueueDepth, Task
from stratamem.pipeline.task_type import TaskType
from stratamem.pipeline.timers import TimerPump
from stratamem.pipeline.worker import Outcome, Worker

__all__ = [
    "DeadLetter",
    "Delivery",
    "ExecResult",
    "ExecutionContext",
    "Executor",
    "ExecutorRegistry",
    "LockGrant",
    "LockScope",
    "Outcome",
    "PipelineBackend",
    "PipelineSettings",
    "QueueDepth",
    "RetryLater",
    "Task",
    "TaskType",
    "TimerPump",
    "Worker",
    "fence_check",
]
