"""The recovery reconciler: evidence only. It tells, for each delivery in flight or pending
reclaim, who still has authority over it and whether its execution finished, so finished work is
acknowledged instead of paid for twice. It changes nothing; the worker's reclaim path uses the
same judgment (`judge`) to acknowledge a redelivered task whose previous execution committed.

Evidence, per delivery:
- the execution stamp its worker recorded when it started (`PipelineBackend.stamp`: attempt,
  delivery count, fencing token, worker, start time), or none if no execution started;
- the completion receipt the task's executor committed with its effects, read from the store
  (`ReceiptReader`), authenticated by its MAC (`stratamem.store.evidence.receipts`);
- the delivery's idle time, the newest fencing token of its lock, its worker's published status.

Authority (first that applies): `fenced` (a newer lock grant exists: the execution's writes are
refused), `delivery lease expired` (idle past `reclaim_idle_ms`: pending reclaim), `worker
offline` (its worker stopped, or never published), `worker status expired` (its worker stopped
publishing: unresponsive), else `current`.

Finding: `no execution expected` (no stamp), `receipt unavailable` (the store could not be
read, or no reader is configured), `completion observed` (an authentic receipt of this very
execution: task, attempt, delivery, token and worker all match), `receipt conflict` (a receipt
that does not verify, or that another execution wrote), `running` (no receipt, authority
current), `exited without receipt` (no receipt, authority lost).

Completion may be submitted (the task acknowledged without running it again) only when the
completion was observed and the execution has lost its authority (a current one acks itself).

With an `ExecutionReader`, each report also carries the execution log's row of the stamped
execution (`logged`: its commit, end, outcome, and when a later execution fenced it;
`stratamem.store.evidence.executions`): what that execution did, even when it wrote no receipt.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any

from stratamem.errors import StratamemError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.executors import ReceiptReader
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import RUNNING, UNRESPONSIVE, worker_statuses
from stratamem.pipeline.task import Delivery, InFlight, Task
from stratamem.pipeline.timers import lock_key_for
from stratamem.store.evidence.executions import Execution
from stratamem.store.evidence.receipts import Attempt, Receipt

#: Reads the execution log of a task id in a tenant (oldest first). Raises when it cannot.
ExecutionReader = Callable[[str, str], Awaitable[list[Execution]]]


class Authority(StrEnum):
    CURRENT = "current"
    FENCED = "fenced"
    WORKER_OFFLINE = "worker offline"
    WORKER_STATUS_EXPIRED = "worker status expired"
    LEASE_EXPIRED = "delivery lease expired"


class Finding(StrEnum):
    NO_EXECUTION = "no execution expected"
    COMPLETED = "completion observed"
    CONFLICT = "receipt conflict"
    UNAVAILABLE = "receipt unavailable"
    RUNNING = "running"
    EXITED = "exited without receipt"


@dataclass(frozen=True)
class Report:
    task: Task
    consumer: str
    deliveries: int
    idle_s: float
    stamp: Attempt | None
    authority: Authority
    finding: Finding
    receipt: Receipt | None = None
    logged: Execution | None = None

    @property
    def may_submit_completion(self) -> bool:
        return self.finding is Finding.COMPLETED and self.authority is not Authority.CURRENT

    def to_json(self) -> dict[str, Any]:
        task = self.task
        return {
            "task": {"id": task.id, "type": task.type.name, "tenant": task.tenant,
                     "session": task.session, "attempt": task.attempt},
            "consumer": self.consumer,
            "deliveries": self.deliveries,
            "idle_s": round(self.idle_s, 3),
            "execution": None if self.stamp is None else self.stamp.to_json(),
            "authority": self.authority.value,
            "finding": self.finding.value,
            "may_submit_completion": self.may_submit_completion,
            "logged": None if self.logged is None else self.logged.to_json(),
        }  # fmt: skip


def matches(stamp: Attempt, receipt: Receipt) -> bool:
    """Whether `receipt` was written by the execution `stamp` describes."""
    return receipt.authentic and receipt.attempt == stamp


def judge(stamp: Attempt | None, receipt: Receipt | None, authority: Authority) -> Finding:
    """The finding for a delivery whose receipt could be read (see the module doc)."""
    if stamp is None:
        return Finding.NO_EXECUTION
    if receipt is None:
        return Finding.RUNNING if authority is Authority.CURRENT else Finding.EXITED
    return Finding.COMPLETED if matches(stamp, receipt) else Finding.CONFLICT


async def reconcile(
    backend: PipelineBackend,
    receipts: ReceiptReader | None,
    settings: PipelineSettings,
    *,
    now: float,
    limit: int = 1000,
    executions: ExecutionReader | None = None,
) -> list[Report]:
    """One evidence-only pass over up to `limit` deliveries in flight (see the module doc)."""
    statuses = {s["name"]: s["state"] for s in await worker_statuses(backend, now, settings)}
    reports = []
    for item in await backend.in_flight(limit=limit, now=now):
        authority = await _authority(backend, settings, item, statuses)
        report = await _report(item, authority, receipts)
        reports.append(replace(report, logged=await _logged(item.delivery, executions)))
    return reports


async def _logged(delivery: Delivery, executions: ExecutionReader | None) -> Execution | None:
    """The log's row of the delivery's stamped execution (None: none, or no log to read)."""
    if executions is None or delivery.stamp is None:
        return None
    try:
        rows = await executions(delivery.task.tenant, delivery.task.id)
    except StratamemError:
        return None
    return next((row for row in rows if row.attempt == delivery.stamp), None)


async def _authority(
    backend: PipelineBackend, settings: PipelineSettings, item: InFlight, statuses: dict[str, str]
) -> Authority:
    stamp = item.delivery.stamp
    if await _fenced(backend, settings, item):
        return Authority.FENCED
    if item.idle_s * 1000 >= settings.reclaim_idle_ms:
        return Authority.LEASE_EXPIRED
    if stamp is None:
        return Authority.CURRENT
    state = statuses.get(stamp.worker)
    if state is None or state not in (RUNNING, UNRESPONSIVE):
        return Authority.WORKER_OFFLINE
    return Authority.WORKER_STATUS_EXPIRED if state == UNRESPONSIVE else Authority.CURRENT


async def _fenced(backend: PipelineBackend, settings: PipelineSettings, item: InFlight) -> bool:
    """Whether a newer grant of the execution's lock exists (its writes would be refused)."""
    stamp = item.delivery.stamp
    key = lock_key_for(item.delivery.task, settings.lock_scope)
    if stamp is None or stamp.token is None or key is None:
        return False
    return await backend.fence_token(key) > stamp.token


async def _report(item: InFlight, authority: Authority, receipts: ReceiptReader | None) -> Report:
    delivery = item.delivery
    receipt, finding = None, Finding.NO_EXECUTION
    if delivery.stamp is not None:
        try:
            if receipts is None:
                raise LookupError("no receipt reader is configured")
            receipt = await receipts(delivery.task.tenant, delivery.task.id)
            finding = judge(delivery.stamp, receipt, authority)
        except (StratamemError, LookupError):
            finding = Finding.UNAVAILABLE
    return Report(delivery.task, delivery.consumer, delivery.deliveries, item.idle_s,
                  delivery.stamp, authority, finding, receipt)  # fmt: skip
