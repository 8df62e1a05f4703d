"""The contract of the memory layers' records: session cursors, memory versions, scenes, profile.

Every write that a pipeline task makes goes through one `commit_*` call: one transaction that
checks the task's fencing token, checks that the state it read (session cursor, tenant L2 mark)
has not moved (`LayerConflict` otherwise), applies the effects, and writes a completion receipt
under the task id. A task that finds its receipt has already finished and does nothing again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from stratamem.domain import MemoryRecord, Profile, Scene, Scope
from stratamem.store.base import Fence


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
class Receipt:
    task_id: str
    kind: str
    completed_at: float
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Supersede:
    """`old_id` stops being valid at the commit time and points to `new_id`."""

    old_id: str
    new_id: str


@dataclass(frozen=True, slots=True)
class L1Commit:
    session: str
    task_id: str
    expected_cursor: int
    new_cursor: int
    now: float
    memories: Sequence[MemoryRecord] = ()
    supersedes: Sequence[Supersede] = ()
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class L2Commit:
    task_id: str
    session: str | None
    expected_mark: int
    new_mark: int
    now: float
    scenes: Sequence[Scene] = ()
    result: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class L3Commit:
    task_id: str
    now: float
    profile: Profile | None
    result: dict[str, Any] = field(default_factory=dict)
    read_at: float | None = None
    """When the L3 read what it wrote from (recorded as `last_l3_at`; default `now`)."""


@dataclass(frozen=True, slots=True)
class Failure:
    """An LLM stage that failed, with every raw reply kept for an operator."""

    task_id: str
    tenant: str
    session: str | None
    stage: str
    error: str
    raws: tuple[str, ...]
    failed_at: float


class LayerStore(Protocol):
    """Records of L1 versions, L2 scenes and L3 profile, beside a `Store`, in the same database."""

    # -- state -------------------------------------------------------------------------------
    def session_state(self, scope: Scope, session: str) -> SessionState:
        """The session's cursor and counters (zeros when the layers never ran)."""

    def sessions_with_pending_turns(self, limit: int) -> list[SessionState]:
        """Sessions (any tenant) with turns past their cursor, oldest last turn first."""

    def sessions_owing_l2(self, limit: int) -> list[tuple[str, str]]:
        """(tenant, session) pairs whose last L1 came after their last L2 (or that never had
        one): their scenes have not seen their newest memories yet."""

    def tenants_owing_l3(self, every_memories: int, limit: int) -> list[str]:
        """Tenants with at least `every_memories` memories made since their last L3."""

    def tenant_state(self, scope: Scope) -> TenantState: ...

    def receipt(self, scope: Scope, task_id: str) -> Receipt | None:
        """The completion receipt of a task, if it committed."""

    # -- L1 ----------------------------------------------------------------------------------
    def commit_l1(self, scope: Scope, commit: L1Commit, fence: Fence | None = None) -> None:
        """Insert memories, supersede old versions, move the cursor, write the receipt.

        Raises `LayerConflict` when the cursor is no longer `expected_cursor` or a superseded
        memory is no longer current, `StaleFencingToken` under a stale fence; nothing is written
        then.
        """

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
        """Write new scene versions and the tenant's L2 mark (`LayerConflict` if it moved)."""

    # -- L3 ----------------------------------------------------------------------------------
    def profile(self, scope: Scope) -> Profile | None: ...

    def profile_history(self, scope: Scope) -> list[Profile]: ...

    def commit_l3(self, scope: Scope, commit: L3Commit, fence: Fence | None = None) -> None:
        """Write a new profile version (if any) and reset the memories-since-L3 counter."""

    # -- failures ----------------------------------------------------------------------------
    def record_failure(self, failure: Failure) -> None: ...

    def list_failures(self, scope: Scope, limit: int = 50) -> list[Failure]: ...
