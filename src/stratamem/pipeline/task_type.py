"""What a task type is, to the pipeline: a name, what a task of it works on, its lock, its timers.

The pipeline names no type of its own. The parts that run tasks declare theirs, one module each
(`stratamem.layers.task_types`, `stratamem.offload.task_types`), and one table module,
`stratamem.task_types`, lists every part's declarations. The pipeline reads that table
(`registered`) whenever it meets a type's name, so every process knows every type, whatever it
imported: a process that runs only offload still reads, reclaims and fires the layers' tasks and
timers that another process wrote, and the SQLite and Redis backends see the same set.

Keys join identifiers with `/`, which `check_ident` never accepts inside a tenant or session, so
two different sessions never share a lock or a timer.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from stratamem.pipeline.errors import UnknownTaskType
from stratamem.pipeline.settings import LockScope


class Scope(StrEnum):
    """What one task (or one lock) works on."""

    SESSION = "session"
    """One session: a task of it names its session."""
    TENANT = "tenant"
    """The whole tenant: a task of it may name the session that asked for it, or none."""


@dataclass(frozen=True, slots=True)
class LockRule:
    """The worker lock of a type's tasks.

    `per`: one lock per session or per tenant. `name`: the lock is the type's own,
    `<name>/<tenant>[/<session>]`; None: the shared one, `session/<tenant>/<session>` or
    `tenant/<tenant>`, which tasks of several types queue behind. `widens`: with
    `LockScope.TENANT`, the tenant's shared lock instead (every widening type then queues behind
    one lock per tenant)."""

    per: Scope
    name: str | None = None
    widens: bool = True

    def key(self, tenant: str, session: str | None, scope: LockScope) -> str:
        if self.widens and scope is LockScope.TENANT:
            return f"tenant/{tenant}"
        prefix = self.name or self.per.value
        if self.per is Scope.TENANT:
            return f"{prefix}/{tenant}"
        return f"{prefix}/{tenant}/{session}"


@dataclass(frozen=True, slots=True)
class SessionTimer:
    """A timer a type arms per session, keyed `<name>/<tenant>/<session>`; declared with its
    type so that ending a session (or dead-lettering one of its tasks) clears it."""

    name: str

    def key(self, tenant: str, session: str) -> str:
        return f"{self.name}/{tenant}/{session}"


@dataclass(frozen=True, slots=True)
class TaskType:
    """One type of task. Equal, hashed and ordered by `name` (the name is what tasks, streams
    and logs carry), so a type read back from a record is the declared one."""

    name: str
    scope: Scope = field(compare=False)
    lock: LockRule | None = field(compare=False)
    """None: its tasks run without a lock."""
    timers: tuple[SessionTimer, ...] = field(default=(), compare=False)

    def __str__(self) -> str:
        return self.name

    def __lt__(self, other: TaskType) -> bool:
        return self.name < other.name

    def lock_key(self, tenant: str, session: str | None, scope: LockScope) -> str | None:
        return None if self.lock is None else self.lock.key(tenant, session, scope)


class TaskTypes:
    """A fixed table of task types, in declaration order, looked up by name."""

    def __init__(self, types: Iterable[TaskType]) -> None:
        self._by_name: dict[str, TaskType] = {}
        for declared in types:
            if declared.name in self._by_name:
                raise ValueError(f"task type {declared.name!r} declared twice")
            self._by_name[declared.name] = declared
        timers = [t.name for declared in self for t in declared.timers]
        if len(timers) != len(set(timers)):
            raise ValueError(f"a session timer declared twice: {sorted(timers)}")

    def __iter__(self) -> Iterator[TaskType]:
        return iter(self._by_name.values())

    def __len__(self) -> int:
        return len(self._by_name)

    def names(self) -> list[str]:
        return list(self._by_name)

    def get(self, value: str | TaskType) -> TaskType:
        """The declared type named `value`; `UnknownTaskType` if no part declares it."""
        found = self._by_name.get(str(value))
        if found is None:
            known = ", ".join(self._by_name)
            raise UnknownTaskType(f"unknown task type {str(value)!r} (known: {known})")
        return found

    def session_timers(self) -> list[SessionTimer]:
        return [timer for declared in self for timer in declared.timers]


@functools.cache
def registered() -> TaskTypes:
    """Every part's task types (`stratamem.task_types`): the one table the pipeline reads.

    Imported at first use, not with this module: the table imports the parts' declarations,
    which import this module."""
    from stratamem.task_types import TABLE  # noqa: PLC0415 - the parts import this module

    return TABLE


def task_type(value: str | TaskType) -> TaskType:
    """The registered type named `value`; `UnknownTaskType` if there is none."""
    return registered().get(value)
