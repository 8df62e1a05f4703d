"""The contract of the memory layers' records: session cursors, memory versions, scenes, profile.

Every write that a pipeline task makes goes through one `commit_*` call: one transaction that
checks the task's fencing token, checks that the state it read (session cursor, tenant L2 mark)
has not moved (`LayerConflict` otherwise), applies the effects, and writes a completion receipt
under the task id (authenticated, bound to the attempt that ran it:
`stratamem.store.evidence.receipts`).
A task that finds its own authentic receipt has already finished and does nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stratamem.clock import Clock
from stratamem.domain import MemoryRecord, Profile, Scene, Scope
from stratamem.store.core.port import Fence
from stratamem.store.evidence.executions import Execution, ExecutionStart
from stratamem.store.evidence.receipts import Attempt, Receipt, ReceiptDraft
from stratamem.store.evidence.retention import LogPage, LogRow, LogTable
from stratamem.store.failures.records import Failure, FailureQuery

__all__ = ["Attempt", "Receipt", "ReceiptDraft"]


@dataclass(frozen=True, slots=True)
class SessionState:
    """Where the layers stand in one session: L0 turns with `seq > cursor_seq` are unprocessed."""

    tenant: str
    session: str
    cursor_seq: int = 0
    last_seq: int = 0
    last_turn_at: float | None = None
    l1_runs: int = 0
    last_l1_at: float | None = None
    last_l2_at: float | None = None

    @property
    def pending_turns(self) -> int:
        return max(0, self.last_seq - self.cursor_seq)


@dataclass(frozen=True, slots=True)
class TenantState:
    """`l2_mark`: memory rows up to this row number are consolidated into scenes."""

    tenant: str
    l2_mark: int = 0
    memories_since_l3: int = 0
    last_l2_at: float | None = None
    last_l3_at: float | None = None


@dataclass(frozen=True, slots=True)
class TenantOwed:
    """A tenant owing L2 or L3: `mark` moves when that work is done (the L2 mark, the time of
    the last L3); `changed_at` is when its newest unconsolidated change was written;
    `last_run_at` when that stage last ran (None: never)."""

    tenant: str
    mark: float
    changed_at: float | None
    last_run_at: float | None = None


@dataclass(frozen=True, slots=True)
class FlushRequest:
    """A flush accepted and not completed yet (the newest request per session)."""

    tenant: str
    session: str
    requested_at: float


@dataclass(frozen=True, slots=True)
class Supersede:
    """`old_id` stops being valid at the commit time and points to `new_id`."""

    old_id: str
    new_id: str


@dataclass(frozen=True, slots=True)
class L1Commit:
    """`quarantined`: turns up to `new_cursor` no accepted extraction covers (open failures of
    kind `quarantine`); `notes`: what the run dropped or split (noted failures)."""

    session: str
    task_id: str
    expected_cursor: int
    new_cursor: int
    now: float
    memories: Sequence[MemoryRecord] = ()
    supersedes: Sequence[Supersede] = ()
    result: dict[str, Any] = field(default_factory=dict)
    quarantined: Sequence[Failure] = ()
    notes: Sequence[Failure] = ()
    attempt: Attempt | None = None


@dataclass(frozen=True, slots=True)
class L2Commit:
    task_id: str
    session: str | None
    expected_mark: int
    new_mark: int
    now: float
    scenes: Sequence[Scene] = ()
    result: dict[str, Any] = field(default_factory=dict)
    notes: Sequence[Failure] = ()
    attempt: Attempt | None = None


@dataclass(frozen=True, slots=True)
class L3Commit:
    task_id: str
    now: float
    profile: Profile | None
    result: dict[str, Any] = field(default_factory=dict)
    read_at: float | None = None
    """When the L3 read what it wrote from (recorded as `last_l3_at`; default `now`)."""
    attempt: Attempt | None = None


@dataclass(frozen=True, slots=True)
class RetryCommit:
    """A retried quarantine whose extraction was accepted: its memories, and the quarantine
    resolved (the cursor is past the turn already)."""

    failure_id: str
    task_id: str
    now: float
    memories: Sequence[MemoryRecord] = ()
    supersedes: Sequence[Supersede] = ()
    result: dict[str, Any] = field(default_factory=dict)
    notes: Sequence[Failure] = ()
    attempt: Attempt | None = None


class LayerStore(Protocol):
    """Records of L1 versions, L2 scenes and L3 profile, beside a `Store`, in the same database."""

    # -- state -------------------------------------------------------------------------------
    def session_state(self, scope: Scope, session: str) -> SessionState:
        """The session's cursor and counters (zeros when the layers never ran)."""

    def pending_turns(self, scope: Scope) -> int:
        """How many of the tenant's turns are past their session's cursor, summed over its
        sessions, in one aggregated query (what `GET /v1/pipeline` reports)."""

    def tenant_state(self, scope: Scope) -> TenantState: ...

    def receipt(self, scope: Scope, task_id: str) -> Receipt | None:
        """The completion receipt of a task (any task type), if it committed; `authentic`
        says whether its MAC verified with a live key."""

    def record_receipt(self, scope: Scope, draft: ReceiptDraft, fence: Fence | None) -> None:
        """Write a receipt alone, under `fence`: for tasks whose effects were committed in
        parts, each under its own receipt (flush, offload-l2). `LayerConflict` if it exists."""

    def rotate_receipt_key(self, now: float, retire_old: bool = False) -> str:
        """Add a new key that signs receipts from now on; the older keys still verify until
        retired (`retire_old`: retire them now, and their receipts stop verifying)."""

    # -- the execution log (`stratamem.store.evidence.executions`) --------------------------
    def start_execution(self, scope: Scope, start: ExecutionStart, clock: Clock) -> Attempt:
        """Record an execution starting now (`clock`, read in the transaction), fencing the open
        ones of its task and lock key; `StaleFencingToken` if a newer token of its lock was
        seen. Returns its `Attempt`."""

    def end_execution(self, scope: Scope, attempt: Attempt, outcome: str, clock: Clock) -> None:
        """Record that the execution `attempt` ended now with `outcome`."""

    def executions(
        self, scope: Scope, task_id: str | None = None, limit: int = 1000
    ) -> list[Execution]:
        """The tenant's executions (of one task), in the order they started."""

    # -- retention of the log and receipts (`stratamem.store.evidence.retention`; any tenant) -----
    def log_page(
        self, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
    ) -> LogPage:
        """Up to `limit` ended executions (or receipts) older than `before`, oldest first,
        after the key `after` (None: from the oldest). Open executions are never listed."""

    def prune_log(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int:
        """Delete `rows` (of one `log_page`) still older than `before`, in one short write
        transaction; returns how many went. The caller leaves out the rows still needed."""

    def prune_receipt_keys(self, before: float) -> int:
        """Delete the receipt keys retired before `before` that no receipt names (never the
        active key, nor one not retired); returns how many went."""

    # -- owed work (the backlog scheduler's queries; any tenant, paged by key) ---------------
    # Each returns up to `limit` rows whose key is greater than `after` (None: from the start),
    # in key order, so a scheduler pages through all owed work with a cursor. Only owed rows
    # are returned: a page costs what it returns, whatever the number of idle sessions.

    def sessions_owing_l1(self, after: tuple[str, str] | None, limit: int) -> list[SessionState]:
        """Sessions (any age) with turns past their cursor; key (tenant, session)."""

    def tenants_owing_l2(self, after: str | None, limit: int) -> list[TenantOwed]:
        """Tenants with memory rows written after their L2 mark; key tenant. `mark` is the L2
        mark, `changed_at` the `created_at` of the newest such memory, `last_run_at` the time
        of the last L2."""

    def tenants_owing_l3(
        self, after: str | None, every_memories: int, limit: int
    ) -> list[TenantOwed]:
        """Tenants with a scene version written after their last L3 read the scenes (or with
        scenes and no L3 yet), or with at least `every_memories` memories since their last L3;
        key tenant. `mark` is the last L3 time (0 if none), `changed_at` the newest scene
        version's time."""

    def request_flush(self, scope: Scope, session: str, now: float) -> None:
        """Record that a flush of `session` was accepted at `now` (kept until completed)."""

    def complete_flush(self, scope: Scope, session: str, started_at: float) -> None:
        """A flush that started at `started_at` caught the session up: forget the requests
        made at or before that time (a later one stays owed)."""

    def flush_requests(self, after: tuple[str, str] | None, limit: int) -> list[FlushRequest]:
        """Flush requests not completed; key (tenant, session)."""

    # -- L1 ----------------------------------------------------------------------------------
    def commit_l1(self, scope: Scope, commit: L1Commit, fence: Fence | None = None) -> None:
        """Insert memories, supersede old versions, move the cursor, record the quarantined
        turns and the notes, resolve the session's open `stage` failures of L1, write the
        receipt: one transaction.

        Raises `LayerConflict` when the cursor is no longer `expected_cursor` or a superseded
        memory is no longer current, `StaleFencingToken` under a stale fence; nothing is written
        then.
        """

    def commit_retry(self, scope: Scope, commit: RetryCommit, fence: Fence | None = None) -> None:
        """Insert the memories of a retried quarantine, supersede, resolve the quarantine, record
        the notes, write the receipt: one transaction (`LayerConflict` when the quarantine is not
        open any more)."""

    def memory_history(self, scope: Scope, memory_id: str) -> list[MemoryRecord]:
        """Every version linked to `memory_id` by `superseded_by`, oldest first (`NotFound`)."""

    def changed_memories(
        self, scope: Scope, after_mark: int, limit: int
    ) -> tuple[list[MemoryRecord], int]:
        """Current memories written after `after_mark`, and the mark to store once consumed."""

    # -- L2 ----------------------------------------------------------------------------------
    def current_scenes(self, scope: Scope) -> list[Scene]:
        """Live (not deleted) scenes, hottest first."""

    def newest_scene_at(self, scope: Scope) -> float | None:
        """When the tenant's newest scene version (a deletion included) was written, if any."""

    def scene_history(self, scope: Scope, scene_id: str) -> list[Scene]:
        """Every version of a scene, oldest first (`NotFound`)."""

    def commit_l2(self, scope: Scope, commit: L2Commit, fence: Fence | None = None) -> None:
        """Write new scene versions and the tenant's L2 mark (`LayerConflict` if it moved),
        record the notes, resolve the tenant's open `stage` failures of L2."""

    # -- L3 ----------------------------------------------------------------------------------
    def profile(self, scope: Scope) -> Profile | None: ...

    def profile_history(self, scope: Scope) -> list[Profile]: ...

    def commit_l3(self, scope: Scope, commit: L3Commit, fence: Fence | None = None) -> None:
        """Write a new profile version (if any), reset the memories-since-L3 counter, resolve
        the tenant's open `stage` failures of L3."""

    # -- failures (of every LLM stage: the offload store records its own here too) -----------
    def record_failures(self, failures: Sequence[Failure]) -> None:
        """Keep failure records (their ids are new), in one transaction."""

    def list_failures(self, scope: Scope, query: FailureQuery | None = None) -> list[Failure]:
        """The tenant's failure records matching `query`, newest first, paged."""

    def get_failure(self, scope: Scope, failure_id: str) -> Failure:
        """One failure record (`NotFound`)."""

    def note_retry(
        self,
        scope: Scope,
        failure_id: str,
        now: float,
        *,
        error: str | None = None,
        raws: Sequence[str] = (),
    ) -> Failure:
        """Count a retry of an open failure: resolved when `error` is None, else still open with
        the new error and `raws` added. Returns the record as updated (`NotFound`)."""
