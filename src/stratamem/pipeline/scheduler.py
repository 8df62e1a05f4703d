"""The backlog scheduler: the queue is a cache of the store.

Every kind of owed work (L1 turns past a cursor, L2 and L3 owed by a tenant, flush requests,
offload work) is a `Source`: a store query that pages through the owed keys of its kind with a
cursor, and says for each key the task to submit, when it is due, and a progress marker that
moves when the work advances. One bounded loop (`BacklogScheduler.run_pass`) walks the sources
and submits what is due, within the queue's free concurrency:

- pages of `max(4 * budget, 16)` keys; the cursor advances past every key it looks at (a key not
  due never blocks one that is) and is restored when the pass fails; at the end of a source it
  starts again from the beginning (a sweep), and the sweep's count is that kind's backlog;
- at most `budget = scheduler_limit - (ready + in flight)` submissions per pass;
- per key: in flight (submitted, not seen to progress yet) → after `in_flight_s` without progress
  it backs off (30 s, doubling, 15 min cap; progress resets it) → due again; a key whose task is
  in the dead-letter queue is parked until an operator requeues or purges it;
- memory: counters and keys only; keys no longer owed are forgotten at the end of each sweep.

It knows tasks and keys only; the memory layers and context offload provide the sources.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from stratamem.clock import Clock
from stratamem.errors import StratamemError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.retention import LogPruner, RetainedLog
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import RUNNING, worker_statuses
from stratamem.pipeline.task import Task

log = logging.getLogger(__name__)
Cursor = tuple[str, ...]
MIN_PAGE = 16
CONSUMERS_FACTOR = 2
"""Tasks kept queued per consumer of the running workers (one running, one waiting)."""
#: Errors a pass survives (logged and counted): the store's and the backend's.
PASS_ERRORS = (StratamemError, sqlite3.Error, OSError)


@dataclass(frozen=True, slots=True)
class Owed:
    """One owed key of a source: submit `task` once `due_at` has come; `progress` changes
    when the work moves on (a cursor, a mark)."""

    key: str
    cursor: Cursor
    task: Task
    due_at: float
    progress: str


@dataclass(frozen=True, slots=True)
class Page:
    """Owed keys in cursor order (a row of the store may give several keys with one cursor,
    or none), and the cursor to read on from (None: the source's end was reached)."""

    items: list[Owed]
    next_after: Cursor | None


class Source(Protocol):
    """One kind of owed work, over a store query (see the module doc)."""

    kind: str

    def page(self, after: Cursor | None, limit: int, now: float) -> Awaitable[Page]:
        """The owed keys of up to `limit` store rows after `after` (None: from the start)."""
        ...

    def key_of(self, task: Task) -> str | None:
        """The key a task of this source stands for (to park keys of dead letters), or None."""
        ...


class KeyState(StrEnum):
    IN_FLIGHT = "in_flight"
    BACKING_OFF = "backing_off"


@dataclass(slots=True)
class _Key:
    state: KeyState
    progress: str
    since: float
    failures: int = 0
    sweep: int = 0


@dataclass(slots=True)
class _SourceState:
    cursor: Cursor | None = None
    sweep: int = 0
    seen: int = 0
    backlog: int | None = None


@dataclass(slots=True)
class Counters:
    passes: int = 0
    errors: int = 0
    discovered: int = 0
    submitted: int = 0
    skipped: int = 0
    limit: int = 0
    """Not a count: the last pass's limit of queued tasks (`BacklogScheduler.limit`)."""

    def as_dict(self) -> dict[str, int]:
        return {"passes": self.passes, "errors": self.errors, "discovered": self.discovered,
                "submitted": self.submitted, "skipped": self.skipped,
                "limit": self.limit}  # fmt: skip


@dataclass(slots=True)
class PassReport:
    submitted: list[Task] = field(default_factory=list)
    errors: int = 0
    budget: int = 0
    """What the pass could submit: when it submitted all of it, more may be due."""

    @property
    def full(self) -> bool:
        return self.budget > 0 and len(self.submitted) >= self.budget


FOLLOW_UP_SHARE = 0.1
"""After a pass that spent its whole budget, the next comes after this share of
`scheduler_interval_s`: while the consumers finish tasks faster than one pass an interval
submits them, owed work is handed out as fast as they take it (a pass that finds the queue
still full has no budget, is not full, and the interval is back)."""


def next_pass_in_s(report: PassReport | None, settings: PipelineSettings) -> float:
    """Seconds until the loop's next pass after `report` (None: this process is not the
    active scheduler)."""
    interval = settings.scheduler_interval_s
    return interval * FOLLOW_UP_SHARE if report is not None and report.full else interval


def backoff_s(failures: int, settings: PipelineSettings) -> float:
    """30 s, 60 s, 120 s … up to the cap (by default)."""
    initial, cap = settings.scheduler_backoff_initial_s, settings.scheduler_backoff_cap_s
    return float(min(initial * 2 ** min(max(failures - 1, 0), 30), cap))


class BacklogScheduler:
    """The scheduler's state and one pass; `SchedulerLoop` runs passes under the lease."""

    def __init__(
        self, backend: PipelineBackend, sources: Sequence[Source], settings: PipelineSettings
    ) -> None:
        self.backend = backend
        self.sources = list(sources)
        self.settings = settings
        self.counters = Counters()
        self._keys: dict[str, dict[str, _Key]] = {s.kind: {} for s in self.sources}
        self._cursors = {s.kind: _SourceState() for s in self.sources}
        self._parked: dict[str, set[str]] = {s.kind: set() for s in self.sources}
        self._parked_at = float("-inf")
        self._first = 0

    def reset(self) -> None:
        """Forget per-key state (when the lease was lost: another scheduler holds it now)."""
        for kind in self._keys:
            self._keys[kind].clear()
            self._cursors[kind] = _SourceState()

    async def budget(self, now: float) -> int:
        """Free concurrency: the limit (`limit`) minus what is queued (ready and in flight)."""
        depth = await self.backend.depth()
        return max(0, await self.limit(now) - depth.ready - depth.in_flight)

    async def limit(self, now: float) -> int:
        """How many tasks to keep queued: `scheduler_limit`, or `CONSUMERS_FACTOR` times the
        running workers' total concurrency when that is more (owed work reaches L1 only through
        this scheduler: with a fixed limit, consumers beyond it would stay idle)."""
        if self.settings.scheduler_limit == 0:
            return 0
        statuses = await worker_statuses(self.backend, now, self.settings)
        consumers = sum(_concurrency(s) for s in statuses if s["state"] == RUNNING)
        self.counters.limit = max(self.settings.scheduler_limit, CONSUMERS_FACTOR * consumers)
        return self.counters.limit

    async def run_pass(self, now: float) -> PassReport:
        """Look through the sources (a different one first each pass) and submit what is due,
        within the budget. A failing source is logged and counted; the others still run."""
        report = PassReport()
        self.counters.passes += 1
        try:
            budget = report.budget = await self.budget(now)
            await self._refresh_parked(now)
        except PASS_ERRORS:
            log.exception("backlog scheduler: the backend failed")
            self.counters.errors += 1
            report.errors += 1
            return report
        order = self.sources[self._first :] + self.sources[: self._first]
        self._first = (self._first + 1) % max(len(self.sources), 1)
        for source in order:
            if budget - len(report.submitted) <= 0:
                break
            await self._scan_guarded(source, budget, now, report)
        return report

    async def _scan_guarded(
        self, source: Source, budget: int, now: float, report: PassReport
    ) -> None:
        saved = self._cursors[source.kind].cursor
        try:
            await self._scan(source, budget, now, report)
        except PASS_ERRORS:
            log.exception("backlog scheduler: source %s failed", source.kind)
            self._cursors[source.kind].cursor = saved
            self.counters.errors += 1
            report.errors += 1

    async def _scan(self, source: Source, budget: int, now: float, report: PassReport) -> None:
        """Page through `source` until the budget is spent or the end of the source. The cursor
        moves past whole rows only, so a row whose keys were not all considered comes first in
        the next pass."""
        at = self._cursors[source.kind]
        page_size = max(4 * budget, MIN_PAGE)
        for _ in range(self.settings.scheduler_pages_per_pass):
            page = await source.page(at.cursor, page_size, now)
            before, row = at.cursor, None  # `before`: the cursor of the last whole row
            for owed in page.items:
                new_row = owed.cursor != row
                if len(report.submitted) >= budget:
                    at.cursor = row if new_row and row is not None else before
                    return
                if new_row:
                    before = before if row is None else row
                    row = owed.cursor
                    at.seen += 1
                if await self._consider(source.kind, owed, now, at.sweep):
                    report.submitted.append(owed.task)
            if page.next_after is None:
                self._end_sweep(source.kind, at)
                return
            at.cursor = page.next_after

    def _end_sweep(self, kind: str, at: _SourceState) -> None:
        """The source's end: its backlog is what this sweep saw; keys it did not see are no
        longer owed and are forgotten."""
        at.backlog, at.seen, at.cursor = at.seen, 0, None
        keys = self._keys[kind]
        for key in [k for k, v in keys.items() if v.sweep < at.sweep]:
            del keys[key]
        at.sweep += 1

    async def _consider(self, kind: str, owed: Owed, now: float, sweep: int) -> bool:
        """Submit `owed` if it is due and not in flight, backing off or parked."""
        self.counters.discovered += 1
        keys = self._keys[kind]
        state = keys.get(owed.key)
        if state is not None and state.progress != owed.progress:
            del keys[owed.key]  # it moved on: a fresh start, no backoff
            state = None
        if state is not None:
            state.sweep = sweep
        if owed.key in self._parked[kind] or not self._due(state, owed, now):
            self.counters.skipped += 1
            return False
        await self.backend.enqueue(owed.task, now=now)
        failures = 0 if state is None else state.failures
        keys[owed.key] = _Key(KeyState.IN_FLIGHT, owed.progress, now, failures, sweep)
        self.counters.submitted += 1
        return True

    def _due(self, state: _Key | None, owed: Owed, now: float) -> bool:
        if state is not None and state.state is KeyState.IN_FLIGHT:
            if now - state.since < self.settings.scheduler_in_flight_s:
                return False
            state.failures += 1  # submitted, and nothing moved: lost or failing
            in_flight_until = state.since + self.settings.scheduler_in_flight_s
            state.state, state.since = KeyState.BACKING_OFF, in_flight_until
        if state is not None and now < state.since + backoff_s(state.failures, self.settings):
            return False
        return owed.due_at <= now

    async def _refresh_parked(self, now: float) -> None:
        """Keys whose task is a dead letter, read again every `scheduler_park_refresh_s`."""
        if now - self._parked_at < self.settings.scheduler_park_refresh_s:
            return
        dead = await self.backend.list_dead(limit=self.settings.scheduler_dead_scan)
        for source in self.sources:
            keys = {source.key_of(d.task) for d in dead}
            self._parked[source.kind] = {k for k in keys if k is not None}
        self._parked_at = now

    def snapshot(self) -> dict[str, Any]:
        """Counters, keys by state and backlog per kind (None until a first sweep ended)."""
        states = [k.state for keys in self._keys.values() for k in keys.values()]
        return {
            **self.counters.as_dict(),
            "in_flight": states.count(KeyState.IN_FLIGHT),
            "backing_off": states.count(KeyState.BACKING_OFF),
            "parked": sum(len(p) for p in self._parked.values()),
            "backlog": {kind: at.backlog for kind, at in self._cursors.items()},
        }


SNAPSHOT_COUNTERS = (*Counters().as_dict(), "in_flight", "backing_off", "parked")
LEASE_KEY = "scheduler/lease"
SCHEDULER_SCOPE = "_scheduler"


def backlog_loop(
    backend: PipelineBackend,
    sources: Sequence[Source],
    settings: PipelineSettings,
    clock: Clock,
    owner: str,
    retained: RetainedLog | None = None,
) -> SchedulerLoop | None:
    """The scheduler loop over `sources` (none when `scheduler_limit` is 0), which also prunes
    the `retained` log (`pipeline.retention`, unless `log_retention_s` is 0); None when it
    would have nothing to do."""
    scheduled = list(sources) if settings.scheduler_limit > 0 else []
    pruner = None
    if retained is not None and settings.log_retention_s > 0:
        pruner = LogPruner(backend, retained, settings)
    if not scheduled and pruner is None:
        return None
    return SchedulerLoop(BacklogScheduler(backend, scheduled, settings), clock, owner, pruner)


class SchedulerLoop:
    """Runs passes every `scheduler_interval_s` while this process holds the deployment's lease
    (a lock on the pipeline backend with a TTL, renewed every pass: when its holder dies, the
    next process to ask takes it over), and the `pruner`'s when due. Publishes the snapshot for
    `pipeline status`. Nothing but `stop` ends the loop: a failed pass is logged, counted and
    followed by the next."""

    def __init__(
        self,
        scheduler: BacklogScheduler,
        clock: Clock,
        owner: str,
        pruner: LogPruner | None = None,
    ) -> None:
        self.scheduler = scheduler
        self.clock = clock
        self.owner = owner
        self.pruner = pruner
        self.active = False

    @property
    def settings(self) -> PipelineSettings:
        return self.scheduler.settings

    async def tick(self) -> PassReport | None:
        """Hold (or take) the lease and run one pass; None when another process holds it."""
        try:
            held = await self._hold_lease()
        except PASS_ERRORS:
            log.exception("backlog scheduler: the lease could not be checked")
            self.scheduler.counters.errors += 1
            return None
        if not held:
            return None
        report = PassReport()
        if self.scheduler.sources:
            report = await self.scheduler.run_pass(self.clock.now())
        await self._prune()
        await self._publish()
        return report

    async def _prune(self) -> None:
        if self.pruner is None:
            return
        try:
            await self.pruner.maybe_run(self.clock.now())
        except PASS_ERRORS:
            log.exception("retention: the pass failed")
            self.pruner.counters.errors += 1

    async def run(self, stop: asyncio.Event) -> None:
        """Pass after pass until `stop` is set; releases the lease when it ends."""
        try:
            while not stop.is_set():
                report = await self.tick()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), next_pass_in_s(report, self.settings))
        finally:
            await self.release()

    async def once(self) -> PassReport | None:
        """One `tick` (a pass, and a retention pass if due), then the lease is released; None
        when another process holds the lease (it runs the passes)."""
        try:
            return await self.tick()
        finally:
            await self.release()

    async def release(self) -> None:
        if self.active:
            self.active = False
            with contextlib.suppress(*PASS_ERRORS):
                await self.scheduler.backend.release_lock(LEASE_KEY, self.owner)

    async def _hold_lease(self) -> bool:
        backend, now = self.scheduler.backend, self.clock.now()
        ttl_ms = self.settings.scheduler_lease_ms
        if self.active and await backend.renew_lock(LEASE_KEY, self.owner, ttl_ms=ttl_ms, now=now):
            return True
        if self.active:
            log.warning("backlog scheduler %s lost its lease", self.owner)
            self.scheduler.reset()
        grant = await backend.acquire_lock(LEASE_KEY, self.owner, ttl_ms=ttl_ms, now=now)
        if grant is not None:
            log.info("backlog scheduler %s holds the lease", self.owner)
            await self._resume_pruner()
        self.active = grant is not None
        return self.active

    async def _resume_pruner(self) -> None:
        """A process taking the lease prunes when the deployment's last retention pass (in
        the snapshot its holder published) is `log_prune_interval_s` old, not at once."""
        if self.pruner is None or self.pruner.counters.last_at is not None:
            return
        snapshot = await read_snapshot(self.scheduler.backend)
        last_at = ((snapshot or {}).get("retention") or {}).get("last_at")
        if last_at is not None:
            self.pruner.counters.last_at = float(last_at)

    async def _publish(self) -> None:
        snapshot = {"owner": self.owner, "updated_at": self.clock.now(),
                    **self.scheduler.snapshot()}  # fmt: skip
        if self.pruner is not None:
            snapshot["retention"] = self.pruner.counters.as_dict()
        with contextlib.suppress(*PASS_ERRORS):
            await self.scheduler.backend.state_set(
                SCHEDULER_SCOPE, "snapshot", json.dumps(snapshot)
            )


async def read_snapshot(backend: PipelineBackend) -> dict[str, Any] | None:
    """What the active scheduler last published (None if no scheduler ever ran)."""
    raw = (await backend.state_get(SCHEDULER_SCOPE)).get("snapshot")
    return None if raw is None else dict(json.loads(raw))


def snapshot_gauges(snapshot: dict[str, Any] | None) -> dict[str, float]:
    """The snapshot as `/metrics` gauges: `scheduler_<counter>`, `scheduler_backlog_<kind>`,
    `retention_<counter>` (rows pruned since the active scheduler's process started, …)."""
    if snapshot is None:
        return {}
    gauges = {f"scheduler_{name}": float(snapshot[name]) for name in SNAPSHOT_COUNTERS}
    for kind, size in snapshot.get("backlog", {}).items():
        if size is not None:
            gauges[f"scheduler_backlog_{kind.replace('-', '_').lower()}"] = float(size)
    for name, value in (snapshot.get("retention") or {}).items():
        if value is not None and name != "last_at":
            gauges[f"retention_{name}"] = float(value)
    return gauges


def _concurrency(status: dict[str, Any]) -> int:
    """The consumers a worker's published status says it runs (0 when it says none)."""
    value = status.get("concurrency")
    return value if isinstance(value, int) and value > 0 else 0
