"""Typed records of the pipeline: tasks, deliveries, lock grants, timers, dead letters.

A `Task` is what producers enqueue (its type is one of the registered `TaskType`s,
`pipeline.task_type`); a `Delivery` is one hand-over of a task to one consumer (the
same task can be delivered again after a crash). Tasks serialise to compact JSON so both backends
store the same bytes.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from typing import Any

from stratamem.domain import check_ident
from stratamem.errors import InvalidInput
from stratamem.pipeline.errors import UnknownTaskType
from stratamem.pipeline.task_type import Scope, TaskType, task_type
from stratamem.store.evidence.receipts import Attempt


def new_task_id() -> str:
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Task:
    """One unit of background work. `attempt` counts previous failed executions (0 at first)."""

    type: TaskType
    """Given as a `TaskType` or its name; always the registered type once made."""
    tenant: str
    session: str | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    attempt: int = 0
    id: str = field(default_factory=new_task_id)

    def __post_init__(self) -> None:
        object.__setattr__(self, "type", task_type(self.type))
        check_ident(self.tenant, "tenant")
        if self.session is not None:
            check_ident(self.session, "session")
        elif self.type.scope is Scope.SESSION:
            raise InvalidInput(f"a {self.type} task needs a session")
        check_ident(self.id, "task id")
        if self.attempt < 0:
            raise InvalidInput("attempt must be >= 0")

    def next_attempt(self) -> Task:
        return replace(self, attempt=self.attempt + 1)

    def to_json(self) -> str:
        body = {
            "id": self.id,
            "type": self.type.name,
            "tenant": self.tenant,
            "session": self.session,
            "payload": self.payload,
            "attempt": self.attempt,
        }
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> Task:
        try:
            body = json.loads(text)
            return cls(
                type=task_type(body["type"]),
                tenant=body["tenant"],
                session=body["session"],
                payload=dict(body["payload"]),
                attempt=int(body["attempt"]),
                id=body["id"],
            )
        except UnknownTaskType:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidInput(f"not a task record: {text!r:.200}") from exc


@dataclass(frozen=True)
class Delivery:
    """One hand-over of `task` to `consumer`. `receipt` is the backend's handle for ack/extend.

    `stamp`: the execution a previous hand-over started (set by `reclaim` when the worker that
    had it stamped it, see `PipelineBackend.stamp`), so the new owner can look for its receipt
    before running the task again; None for a fresh delivery."""

    task: Task
    receipt: str
    consumer: str
    deliveries: int
    enqueued_at: float
    stamp: Attempt | None = None


@dataclass(frozen=True)
class InFlight:
    """A delivery still pending (delivered, not acknowledged), idle for `idle_s`; its `stamp`
    is the execution its worker started, None when none started."""

    delivery: Delivery
    idle_s: float


@dataclass(frozen=True)
class LockGrant:
    """A granted lock. `token` is the fencing token: it only grows for a given key."""

    key: str
    owner: str
    token: int


@dataclass(frozen=True)
class DeadLetter:
    id: str
    task: Task
    error: str
    failed_at: float


@dataclass(frozen=True)
class QueueDepth:
    ready: int
    in_flight: int
    timers: int
    dead: int
    queued: dict[TaskType, int] = field(default_factory=dict)
    """Ready and in-flight tasks per type (a type with none may be left out): what the backlog
    scheduler's budget of each kind counts."""

    def queued_of(self, types: Collection[TaskType]) -> int:
        return sum(self.queued.get(t, 0) for t in types)

    def as_dict(self) -> dict[str, int]:
        return {
            "ready": self.ready,
            "in_flight": self.in_flight,
            "timers": self.timers,
            "dead": self.dead,
        }
