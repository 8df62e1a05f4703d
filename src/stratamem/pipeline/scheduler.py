"""The backlog scheduler: the queue is a cache of the store.

Every kind of owed work (L1 turns past a cursor, L2 and L3 owed by a tenant, flush requests,
each offload stage's work) is a `Source`: a store query that pages through the owed keys of its
kind with a cursor, and says for each key the task to submit (of the source's one task type),
when it is due, and a progress marker that moves when the work advances. One bounded loop
(`BacklogScheduler.run_pass`) walks the sources and submits what is due, within each kind's
free concurrency:

- each kind has its own scheduler among the processes that have its source: a lease per kind
  (`scheduler/lease/<kind>`, and `scheduler/lease/retention` for retention), so a deployment
  split by kind (an offload-only worker, a layers-only one, `stratamem schedule`) schedules
  every kind somewhere, and one process may hold some kinds while another holds the rest;
- a budget per kind: `limit - queued`, where `queued` counts the ready and in-flight tasks of
  that kind's type only and `limit` is `scheduler_limit`, or twice the consumers of the
  running workers that run that type when that is more; a type whose tasks wait (no worker
  runs it, or its workers are slow) never holds back another;
- pages of `max(4 * budget, 16)` keys; the cursor advances past every key it looks at (a key not
  due never blocks one that is) and is restored when the pass fails; at the end of a source it
  starts again from the beginning (a sweep), and the sweep's count is that kind's backlog;
- per key: in flight (submitted, not seen to progress yet) → after `in_flight_s` without progress
  it backs off (30 s, doubling, 15 min cap; progress resets it) → due again; a key whose task is
  in the dead-letter queue is parked until an operator requeues or purges it;
- between passes the loop waits for consumers of its kinds' types to be free
  (`PipelineBackend.wait_free`: a worker's consumer that started or finished a task), at most
  `scheduler_interval_s`, so the queue is refilled as soon as consumers take from it; such an
  early pass looks only at the kinds that submitted at their last look (or that have not been
  looked at for an interval): a kind that had nothing due is looked at once an interval;
- memory: counters and keys only; keys no longer owed are forgotten at the end of each sweep.

It knows tasks and keys only; the memory layers and context offload provide the sources.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sqlite3
from collections.abc import Awaitable, Collection, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from stratamem.clock import Clock
from stratamem.errors import StratamemError
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.retention import LogPruner, RetainedLog
from stratamem.pipeline.settings import PipelineSettings
from stratamem.pipeline.status import RUNNING, worker_statuses
from stratamem.pipeline.task import QueueDepth, Task
from stratamem.pipeline.task_type import TaskType, registered

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
    task_type: TaskType
    """The type of every task it submits: its budget counts the queued tasks of this type."""

    def page(self, after: Cursor | None, limit: int, now: float) -> Awaitable[Page]:
        """The owed keys of up to `limit` store rows after `after` (None: from the start)."""
        ...

    def key_of(self, task: Task) -> str | None:
        """The key a task of this source stands for (to park keys of dead letters), or None."""
        ...

    def when_parked(self, owed: Owed, now: float) -> Owed | None:
        """What to submit instead for `owed` while its key is parked (a fallback that needs
        none of the work that failed, under a key of its own), or None: nothing."""
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
    """What the pass could submit, over all its kinds."""
    spent: list[str] = field(default_factory=list)
    """The kinds that submitted their whole budget: more of them may be due."""

    @property
    def full(self) -> bool:
        return bool(self.spent)


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
        self._fallbacks = {s.kind: s.when_parked for s in self.sources}
        self._parked_at = float("-inf")
        self._first = 0
        self._looked: dict[str, tuple[float, bool]] = {}  # kind -> (last scanned, submitted)

    def reset(self, kinds: Collection[str] | None = None) -> None:
        """Forget the per-key state of `kinds` (all when None): their lease was lost, another
        scheduler holds it now."""
        for kind in self._keys:
            if kinds is None or kind in kinds:
                self._keys[kind].clear()
                self._cursors[kind] = _SourceState()
                self._looked.pop(kind, None)

    def worth_a_look(self, kinds: Collection[str], now: float) -> set[str]:
        """Of `kinds`, those a pass woken early (by free consumers) looks at: those that
        submitted at their last look (more may be due), never looked at, or last looked at
        `scheduler_interval_s` ago. A kind that had nothing due waits for the interval, as it
        would with no wake-ups: walking every not-due L2 tenant at each finished task cost a
        worker more CPU than its tasks' SQL (bench/drain.py)."""
        interval = self.settings.scheduler_interval_s
        return {kind for kind in kinds
                if (looked := self._looked.get(kind)) is None
                or looked[1] or now - looked[0] >= interval}  # fmt: skip

    def types_of(self, kinds: Collection[str]) -> list[TaskType]:
        """The task types the sources of `kinds` submit."""
        return sorted({s.task_type for s in self.sources if s.kind in kinds})

    async def budgets(self, now: float, kinds: Collection[str] | None = None) -> dict[str, int]:
        """Free concurrency per kind (of `kinds`, all when None): its type's limit (`limits`)
        minus its type's queued tasks (ready and in flight)."""
        depth = await self.backend.depth()
        limits = await self.limits(now)
        return {s.kind: _free(limits[s.task_type], depth, s.task_type)
                for s in self.sources if kinds is None or s.kind in kinds}  # fmt: skip

    async def limits(self, now: float) -> dict[TaskType, int]:
        """How many tasks of each type to keep queued: `scheduler_limit`, or
        `CONSUMERS_FACTOR` times the consumers of the running workers that run that type when
        that is more (owed work reaches L1 only through this scheduler: with a fixed limit,
        consumers beyond it would stay idle). The counters keep the largest."""
        if self.settings.scheduler_limit == 0:
            return dict.fromkeys(registered(), 0)
        statuses = await worker_statuses(self.backend, now, self.settings)
        running = [s for s in statuses if s["state"] == RUNNING]
        floor = self.settings.scheduler_limit
        limits = {t: max(floor, CONSUMERS_FACTOR * sum(_concurrency(s) for s in running
                                                         if _runs(s, t)))
                  for t in registered()}  # fmt: skip
        self.counters.limit = max(limits.values())
        return limits

    async def run_pass(self, now: float, kinds: Collection[str] | None = None) -> PassReport:
        """Look through the sources of `kinds` (all when None; a different one first each
        pass) and submit what is due, within each kind's budget. A failing source is logged
        and counted; the others still run."""
        report = PassReport()
        self.counters.passes += 1
        try:
            budgets = await self.budgets(now, kinds)
            await self._refresh_parked(now)
        except PASS_ERRORS:
            log.exception("backlog scheduler: the backend failed")
            self.counters.errors += 1
            report.errors += 1
            return report
        report.budget = sum(budgets.values())
        order = self.sources[self._first :] + self.sources[: self._first]
        self._first = (self._first + 1) % max(len(self.sources), 1)
        for source in order:
            budget = budgets.get(source.kind, 0)
            if budget <= 0:
                continue
            submitted = await self._scan_guarded(source, budget, now, report)
            self._looked[source.kind] = (now, bool(submitted))
            report.submitted += submitted
            if len(submitted) >= budget:
                report.spent.append(source.kind)
        return report

    async def _scan_guarded(
        self, source: Source, budget: int, now: float, report: PassReport
    ) -> list[Task]:
        """The tasks of `source` submitted (up to `budget`)."""
        saved, submitted = self._cursors[source.kind].cursor, list[Task]()
        try:
            await self._scan(source, budget, now, submitted)
        except PASS_ERRORS:
            log.exception("backlog scheduler: source %s failed", source.kind)
            self._cursors[source.kind].cursor = saved
            self.counters.errors += 1
            report.errors += 1
        return submitted

    async def _scan(self, source: Source, budget: int, now: float, submitted: list[Task]) -> None:
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
                if len(submitted) >= budget:
                    at.cursor = row if new_row and row is not None else before
                    return
                if new_row:
                    before = before if row is None else row
                    row = owed.cursor
                    at.seen += 1
                task = await self._consider(source.kind, owed, now, at.sweep)
                if task is not None:
                    submitted.append(task)
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

    async def _consider(self, kind: str, owed: Owed, now: float, sweep: int) -> Task | None:
        """Submit `owed` if it is due and not in flight, backing off or parked (then its
        source's fallback, if any, instead): the task submitted."""
        self.counters.discovered += 1
        keys = self._keys[kind]
        state = keys.get(owed.key)
        if state is not None and state.progress != owed.progress:
            del keys[owed.key]  # it moved on: a fresh start, no backoff
            state = None
        if state is not None:
            state.sweep = sweep
        if owed.key in self._parked[kind]:
            fallback = self._fallbacks[kind](owed, now)
            if fallback is None or fallback.key in self._parked[kind]:
                self.counters.skipped += 1
                return None
            return await self._consider(kind, fallback, now, sweep)
        if not self._due(state, owed, now):
            self.counters.skipped += 1
            return None
        await self.backend.enqueue(owed.task, now=now)
        failures = 0 if state is None else state.failures
        keys[owed.key] = _Key(KeyState.IN_FLIGHT, owed.progress, now, failures, sweep)
        self.counters.submitted += 1
        return owed.task

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
LEASE_PREFIX = "scheduler/lease/"
RETENTION = "retention"
"""The lease of retention, beside the kinds' (a process without sources may prune)."""
SCHEDULER_SCOPE = "_scheduler"
SNAPSHOT_PREFIX = "snapshot/"
WAIT_MARGIN_S = 0.5
"""How much longer than its own timeout a wait for free consumers may take before it is given
up (the backend's wait returns by itself at its timeout)."""
RENEW_SHARE = 1 / 3
"""A held lease is renewed once this share of its TTL has passed since its last renewal (not
every pass: passes follow each other as fast as consumers free up)."""


def lease_key(name: str) -> str:
    """The lease of a kind (or of `RETENTION`)."""
    return f"{LEASE_PREFIX}{name}"


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
    """Runs passes over the kinds whose lease this process holds (a lock per kind on the
    pipeline backend with a TTL, renewed while held: when its holder dies, the next process
    with that kind's source to ask takes it over), and the `pruner`'s under the retention
    lease, when due. Between passes it waits for free consumers of its kinds' types, at most
    `scheduler_interval_s`. Publishes a snapshot per kind held for `pipeline status`. Nothing
    but `stop` ends the loop: a failed pass is logged, counted and followed by the next."""

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
        self._held: dict[str, float] = {}  # lease -> when it was last taken or renewed
        self._tried: dict[str, float] = {}  # lease not held -> when it was last asked for
        self._published: tuple[float, frozenset[str]] = (float("-inf"), frozenset())
        self._parts: dict[str, tuple[str, float]] = {}  # lease -> (part written, when)
        self.last_held: set[str] = set()
        """The leases held at the last `tick` (kept after `release`)."""

    @property
    def settings(self) -> PipelineSettings:
        return self.scheduler.settings

    @property
    def active(self) -> bool:
        """Whether this process holds at least one lease."""
        return bool(self._held)

    @property
    def held(self) -> set[str]:
        """The kinds (and `RETENTION`) whose lease this process holds."""
        return set(self._held)

    def leases(self) -> list[str]:
        """What this loop can hold: its sources' kinds, and retention with a pruner."""
        kinds = [s.kind for s in self.scheduler.sources]
        return kinds + ([RETENTION] if self.pruner is not None else [])

    async def tick(self, *, early: bool = False) -> PassReport | None:
        """Hold (or take) the leases and run one pass over the kinds held; None when another
        process holds every lease. `early`: the pass may come before the interval is over (the
        loop's, woken by free consumers): it looks only at the kinds worth it
        (`BacklogScheduler.worth_a_look`)."""
        try:
            await self._hold_leases()
        except PASS_ERRORS:
            log.exception("backlog scheduler: the leases could not be checked")
            self.scheduler.counters.errors += 1
            return None
        self.last_held = self.held
        if not self._held:
            return None
        report = PassReport()
        kinds = self.held - {RETENTION}
        if early:
            kinds = self.scheduler.worth_a_look(kinds, self.clock.now())
        if kinds:
            report = await self.scheduler.run_pass(self.clock.now(), kinds)
        if RETENTION in self._held:
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
        """Pass after pass until `stop` is set; releases the leases when it ends."""
        try:
            while not stop.is_set():
                report = await self.tick(early=True)
                await self._wait(stop, next_pass_in_s(report, self.settings))
        finally:
            await self.release()

    async def _wait(self, stop: asyncio.Event, timeout_s: float) -> None:
        """Until `stop`, a free consumer of the held kinds' types, or `timeout_s`."""
        types = self.scheduler.types_of(self.held)
        waits: list[asyncio.Future[Any]] = [asyncio.ensure_future(stop.wait())]
        if types:
            free = self.scheduler.backend.wait_free(types, timeout_s=timeout_s)
            waits.append(asyncio.ensure_future(free))
        try:
            # wait_free ends by itself at `timeout_s`: cancelling a blocked BLPOP would drop its
            # Redis connection (and maybe a notice it had just taken) at every idle interval
            done, _ = await asyncio.wait(waits, timeout=timeout_s + WAIT_MARGIN_S,
                                         return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            failed = [w for w in done if not w.cancelled() and w.exception() is not None]
            if failed and not stop.is_set():  # the backend failed: wait the interval out
                log.warning("backlog scheduler: waiting for free consumers failed: %s",
                            failed[0].exception())  # fmt: skip
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), timeout_s)
        finally:
            for waiting in waits:
                waiting.cancel()
            await asyncio.gather(*waits, return_exceptions=True)

    async def once(self) -> PassReport | None:
        """One `tick` (a pass, and a retention pass if due), then the leases are released;
        None when other processes hold every lease (they run the passes)."""
        try:
            return await self.tick()
        finally:
            await self.release()

    async def release(self) -> None:
        held, self._held = list(self._held), {}
        for name in held:
            with contextlib.suppress(*PASS_ERRORS):
                await self.scheduler.backend.release_lock(lease_key(name), self.owner)

    @property
    def _renew_s(self) -> float:
        """How long after its last renewal a held lease is renewed (and a snapshot part that
        says the same is written again)."""
        return RENEW_SHARE * self.settings.scheduler_lease_ms / 1000

    async def _hold_leases(self) -> None:
        now = self.clock.now()
        await self._renew_due(now)
        for name in self.leases():
            if name not in self._held:
                await self._hold(name, now)

    async def _renew_due(self, now: float) -> None:
        """Renew, in one write, the held leases a renewal is due for (a third of the TTL since
        the last); a lease not renewed was lost, and its kinds forget their state."""
        due = [name for name, at in self._held.items() if now - at >= self._renew_s]
        if not due:
            return
        renewed = await self.scheduler.backend.renew_locks(
            [lease_key(name) for name in due], self.owner,
            ttl_ms=self.settings.scheduler_lease_ms, now=now,
        )  # fmt: skip
        for name in due:
            if lease_key(name) in renewed:
                self._held[name] = now
                continue
            log.warning("backlog scheduler %s lost its lease of %s", self.owner, name)
            del self._held[name]
            self.scheduler.reset([name])

    async def _hold(self, name: str, now: float) -> None:
        """Ask for the lease `name` (at most once an interval)."""
        backend, key = self.scheduler.backend, lease_key(name)
        ttl_ms = self.settings.scheduler_lease_ms
        if now - self._tried.get(name, float("-inf")) < self.settings.scheduler_interval_s:
            return
        self._tried[name] = now
        if await backend.acquire_lock(key, self.owner, ttl_ms=ttl_ms, now=now) is None:
            return
        log.info("backlog scheduler %s holds the lease of %s", self.owner, name)
        self._held[name] = now
        if name == RETENTION:
            await self._resume_pruner()

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
        """A snapshot per lease held, at most once an interval (and whenever the leases held
        change)."""
        now, held = self.clock.now(), frozenset(self._held)
        last_at, last_held = self._published
        if held == last_held and now - last_at < self.settings.scheduler_interval_s:
            return
        self._published = (now, held)
        snapshot = self.scheduler.snapshot()
        for name in sorted(held):
            if name == RETENTION and self.pruner is not None:
                part: dict[str, Any] = {"owner": self.owner, **self.pruner.counters.as_dict()}
            else:
                part = {"owner": self.owner, **{k: snapshot[k] for k in SNAPSHOT_COUNTERS},
                        "backlog": snapshot["backlog"].get(name)}  # fmt: skip
            await self._publish_part(name, part, now)

    async def _publish_part(self, name: str, part: dict[str, Any], now: float) -> None:
        """Write one lease's part, unless it says what it said when last written (the passes
        run aside) within a lease renewal's time: an idle deployment wrote every part every
        interval (10 parts a second on SQLite, most of an idle serve's writes)."""
        body = json.dumps({k: v for k, v in part.items() if k != "passes"}, sort_keys=True)
        last = self._parts.get(name)
        if last is not None and last[0] == body and now - last[1] < self._renew_s:
            return
        with contextlib.suppress(*PASS_ERRORS):
            await self.scheduler.backend.state_set(
                SCHEDULER_SCOPE, SNAPSHOT_PREFIX + name, json.dumps({**part, "updated_at": now})
            )
            self._parts[name] = (body, now)


async def read_snapshot(backend: PipelineBackend) -> dict[str, Any] | None:
    """What the active schedulers last published (None if no scheduler ever ran): the
    counters summed over the processes holding a kind's lease, the backlog per kind, who
    holds each lease (`owners`; `owner` names them all), and retention's counters."""
    raw = await backend.state_get(SCHEDULER_SCOPE)
    parts = {name.removeprefix(SNAPSHOT_PREFIX): json.loads(value)
             for name, value in raw.items() if name.startswith(SNAPSHOT_PREFIX)}  # fmt: skip
    if not parts:
        return None
    kinds = {k: p for k, p in parts.items() if k != RETENTION}
    by_owner: dict[str, dict[str, Any]] = {}
    for part in sorted(kinds.values(), key=lambda p: float(p["updated_at"])):
        by_owner[part["owner"]] = part  # each process's newest counters
    merged: dict[str, Any] = {name: sum(int(p.get(name, 0)) for p in by_owner.values())
                              for name in SNAPSHOT_COUNTERS}  # fmt: skip
    merged["limit"] = max((int(p.get("limit", 0)) for p in by_owner.values()), default=0)
    owners = {k: p["owner"] for k, p in sorted(parts.items())}
    merged.update(
        owner=", ".join(sorted(set(owners.values()))),
        owners=owners,
        updated_at=max(float(p["updated_at"]) for p in parts.values()),
        backlog={k: p.get("backlog") for k, p in sorted(kinds.items())},
    )
    if RETENTION in parts:
        merged["retention"] = {k: v for k, v in parts[RETENTION].items()
                               if k not in ("owner", "updated_at")}  # fmt: skip
    return merged


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


def _free(limit: int, depth: QueueDepth, task_type: TaskType) -> int:
    return max(0, limit - depth.queued_of([task_type]))


def _runs(status: dict[str, Any], task_type: TaskType) -> bool:
    """Whether a worker's published status says it runs `task_type` (a status without its
    types, from an older worker, runs every type)."""
    types = status.get("types")
    return not isinstance(types, list) or task_type.name in types


def _concurrency(status: dict[str, Any]) -> int:
    """The consumers a worker's published status says it runs (0 when it says none)."""
    value = status.get("concurrency")
    return value if isinstance(value, int) and value > 0 else 0
