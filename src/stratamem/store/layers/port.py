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

from stratamem.domain import MemoryRecord, Profile, Scene, Scope
from stratamem.store.core.port import Fence
from stratamem.store.evidence.receipts import Attempt
from stratamem.store.failures.records import Failure, FailureQuery
from stratamem.store.layers.ledger import Outcome, TurnOutcome
from stratamem.store.lineage.rows import Ref


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
class Supersede:
    """`old_id` stops being valid at the commit time and points to `new_id`."""

    old_id: str
    new_id: str


@dataclass(frozen=True, slots=True)
class Extraction:
    """What an accepted L1 extraction writes, whichever run made it (`L1Commit`, `RetryCommit`,
    `RereadCommit`): the new memories and the versions they replace, `quarantined` (turns no
    accepted extraction covers: open failures of kind `quarantine`), `notes` (what the run
    dropped or split: noted failures) and `outcomes`, the turn ledger's entry of every turn the
    run settled."""

    memories: Sequence[MemoryRecord] = ()
    supersedes: Sequence[Supersede] = ()
    quarantined: Sequence[Failure] = ()
    notes: Sequence[Failure] = ()
    outcomes: Sequence[TurnOutcome] = ()


NOTHING_EXTRACTED = Extraction()


@dataclass(frozen=True, slots=True)
class L1Commit:
    """An L1 run: its extraction, and the session's cursor moved from `expected_cursor` to
    `new_cursor`."""

    session: str
    task_id: str
    expected_cursor: int
    new_cursor: int
    now: float
    extraction: Extraction = NOTHING_EXTRACTED
    result: dict[str, Any] = field(default_factory=dict)
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
    sources: Sequence[Ref] = ()
    """What the profile version was written from (memories, scene versions): its lineage."""


@dataclass(frozen=True, slots=True)
class RetryCommit:
    """A retried quarantine whose extraction was accepted: its memories, and the quarantine
    resolved (the cursor is past the turn already)."""

    failure_id: str
    task_id: str
    now: float
    extraction: Extraction = NOTHING_EXTRACTED
    result: dict[str, Any] = field(default_factory=dict)
    attempt: Attempt | None = None


@dataclass(frozen=True, slots=True)
class RereadCommit:
    """Turns read again (they had `expected`, e.g. nothing to remember): what the new
    extraction gave, with their new outcomes (`extraction.outcomes`); no cursor moves."""

    session: str
    task_id: str
    now: float
    expected: Outcome
    extraction: Extraction
    result: dict[str, Any] = field(default_factory=dict)
    attempt: Attempt | None = None


class LayerStore(Protocol):
    """Records of L1 versions, L2 scenes and L3 profile, beside a `Store`, in the same database.

    Each commit writes its task's receipt; reading receipts, the pipeline's execution log and
    the receipts' keys are `store.evidence.port.EvidenceStore`; the layers' owed work, for the
    backlog scheduler, `store.backlog.BacklogStore`."""

    # -- state -------------------------------------------------------------------------------
    def session_state(self, scope: Scope, session: str) -> SessionState:
        """The session's cursor and counters (zeros when the layers never ran)."""

    def pending_turns(self, scope: Scope) -> int:
        """How many of the tenant's turns are past their session's cursor, summed over its
        sessions, in one aggregated query (what `GET /v1/pipeline` reports)."""

    def tenant_state(self, scope: Scope) -> TenantState: ...

    def last_turn_at(self, scope: Scope) -> float | None:
        """When the tenant's newest turn was said, over its sessions (None: no turn)."""

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

    def commit_reread(
        self, scope: Scope, commit: RereadCommit, fence: Fence | None = None
    ) -> None:
        """Insert the memories of turns read again, supersede, record quarantines and notes,
        replace the turns' outcomes, write the receipt: one transaction (`LayerConflict` when
        one of the turns no longer has `expected`)."""

    # -- the turn ledger ---------------------------------------------------------------------
    def turn_outcomes(
        self, scope: Scope, session: str, turn_ids: Sequence[str]
    ) -> dict[str, TurnOutcome]:
        """The recorded L1 outcomes of some turns of a session, by turn id (turns past the
        cursor, and turns settled before the ledger, have none)."""

    def outcome_counts(self, scope: Scope, session: str | None = None) -> dict[str, dict[str, int]]:
        """Per session (one, or every one of the tenant): how many turns have each outcome
        (`store.layers.ledger.Outcome`; `pending` includes the turns past the cursor)."""

    def turns_with_outcome(
        self, scope: Scope, session: str | None, outcome: Outcome, limit: int
    ) -> list[TurnOutcome]:
        """Turns whose outcome is `outcome`, by session and order."""

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

    def stale(self, scope: Scope) -> dict[Ref, str]:
        """The scenes (`Ref(scene, id)`) and the profile (`Ref(profile, "")`) built from a
        memory since corrected, superseded or forgotten, and why (`corrected`, `forgotten`):
        L2 writes the scenes again, L3 the profile (clearing them)."""

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

    def schedule_retry(
        self, scope: Scope, failure_id: str, retry_at: float | None, auto_retries: int
    ) -> None:
        """Set when an open record is retried by itself next (None: never, it waits for an
        operator) and how many automatic retries it had; a record not open is left alone."""

    def resolve_retry(self, scope: Scope, failure_id: str, now: float) -> Failure:
        """Count a retry of an open failure that succeeded: the record is resolved. Returns it
        as updated (`NotFound`; `LayerConflict` when it is not open)."""

    def note_retry(
        self, scope: Scope, failure_id: str, now: float, error: str, raws: Sequence[str]
    ) -> Failure:
        """Count a retry of an open failure that failed again: still open, with the new `error`
        and `raws` added. Returns the record as updated (`NotFound`; `LayerConflict` when it is
        not open)."""
