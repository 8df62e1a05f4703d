"""The offload store contract: what the offload stages need from the system of record.

Every method takes the tenant `Scope` first and a session validated by `check_ident`. Methods
are synchronous (the facade runs them in a thread); each write is one short transaction.
Implementation: `stratamem.store.offload.store.SqlOffloadStore` (on either store).

- Tool pairs are appended durably and idempotently (one per tenant, session and call id).
- `claim_pairs` hands pending pairs to one L1 run under a lease: a run that crashes leaves its
  claim to expire, and a later run claims the pairs again. Entries are unique per call id, so a
  re-run never duplicates one; `complete_claim` stores entries and refs and marks pairs done in
  one transaction.
- The boundary (active task, version) changes only by compare-and-set (`apply_decision`).
- Diagrams change only by compare-and-set on their version, under the writer's fence.
- Failure records of the offload stages go into the record set the layer store reads
  (`store.failures`, `LayerStore.list_failures`): `record_failures` writes them, and each
  stage's commit (`complete_claim`, `apply_decision`, `save_diagram`) resolves the session's
  open `stage` failures of that stage in its own transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Protocol

from stratamem.domain import Scope
from stratamem.store.core.port import Fence
from stratamem.store.evidence.receipts import Receipt, ReceiptDraft
from stratamem.store.failures.records import Failure
from stratamem.store.offload.records import (
    Appended,
    Boundary,
    Claim,
    ClaimCommit,
    Diagram,
    DiagramWrite,
    Entry,
    JudgmentCommit,
    Mark,
    OffloadOwed,
    OffloadStage,
    Ref,
    Routed,
    ToolPair,
)


class OffloadStore(Protocol):
    # -- tool pairs and claims ---------------------------------------------------------------
    def append_pairs(
        self, scope: Scope, session: str, pairs: Sequence[ToolPair], now: float
    ) -> Appended:
        """Store new pairs (a call id seen before is a duplicate); count the pending ones."""

    def claim_pairs(
        self, scope: Scope, session: str, claim_id: str, now: float, lease_s: float, limit: int
    ) -> Claim:
        """Claim up to `limit` pending pairs not under a live claim, oldest first. Pairs whose
        call id already has an entry are marked done instead and listed as duplicates."""

    def sessions_owing(
        self,
        after: tuple[str, str] | None,
        now: float,
        limit: int,
        stages: Collection[OffloadStage] | None = None,
    ) -> list[OffloadOwed]:
        """Sessions (any tenant) with owed offload work of `stages` (all when None; see
        `OffloadOwed`, whose parts of other stages are None), in (tenant, session) order
        after `after` (None: from the start), up to `limit`; the backlog scheduler pages
        through them with a cursor. Only owed rows of those stages are read."""

    def next_claim_expiry(self, scope: Scope, session: str, now: float) -> float | None:
        """When the earliest live claim on a pending pair of the session expires, if any."""

    def release_claim(self, scope: Scope, session: str, claim_id: str) -> int:
        """Give the claimed pairs back (after a failed run); returns how many."""

    def complete_claim(self, scope: Scope, session: str, commit: ClaimCommit) -> list[Entry]:
        """In one transaction: insert entries (routed by the boundary covering their time) and
        their refs, skip call ids with an entry, mark the pairs done, resolve the session's open
        offload-l1 failures, write the commit's receipt (the task's); returns the new entries."""

    # -- entries and refs --------------------------------------------------------------------
    def list_entries(
        self, scope: Scope, session: str, call_ids: Sequence[str] | None = None
    ) -> list[Entry]:
        """Entries of the session (or those of `call_ids`), oldest first."""

    def unmapped_entries(self, scope: Scope, session: str) -> list[Entry]:
        """Entries routed to a task whose tool call has no diagram node yet, oldest first."""

    def get_ref(self, scope: Scope, ref_id: str) -> Ref:
        """The full result behind `ref_id`; `NotFound` if the tenant has no such ref."""

    # -- boundaries and judgments ------------------------------------------------------------
    def add_mark(self, scope: Scope, session: str, mark: Mark) -> bool:
        """Record a user message as a boundary pending judgment; False if already known."""

    def get_mark(self, scope: Scope, session: str, mark_id: str) -> Mark:
        """One boundary; `NotFound` if unknown."""

    def recent_marks(self, scope: Scope, session: str, until_ts: float, limit: int) -> list[Mark]:
        """Up to `limit` boundaries at or before `until_ts`, oldest first."""

    def unjudged_marks(self, scope: Scope, session: str) -> list[Mark]:
        """Boundaries still waiting for their judgment, oldest first."""

    def pending_pairs(self, scope: Scope, session: str) -> int:
        """How many pairs of the session have no entry yet (claimed or not)."""

    def boundary(self, scope: Scope, session: str) -> Boundary:
        """The session's routing state (version 0 before the first judgment)."""

    def apply_decision(self, scope: Scope, session: str, commit: JudgmentCommit) -> Routed:
        """Compare-and-set: apply a judgment of its mark if the boundary is still at its
        `expected_version`, else raise `VersionConflict`. Creates, switches or clears the active
        task, routes the mark's unrouted entries to the task it chose, resolves the session's
        open offload-l15 failures and writes the commit's receipt (the task's)."""

    # -- receipts (the same records as `EvidenceStore.receipt` / `record_receipt`) -------------
    def receipt(self, scope: Scope, task_id: str) -> Receipt | None:
        """The receipt of a task, if it committed; `authentic` if its MAC verified."""

    def record_receipt(self, scope: Scope, draft: ReceiptDraft, fence: Fence | None) -> None:
        """Write a receipt alone under `fence` (offload-l2, which commits once per diagram)."""

    # -- diagrams ----------------------------------------------------------------------------
    def list_diagrams(self, scope: Scope, session: str) -> list[Diagram]:
        """Every task of the session with its diagram, most recently updated first."""

    def save_diagram(
        self, scope: Scope, session: str, write: DiagramWrite, now: float, fence: Fence | None
    ) -> Diagram:
        """Compare-and-set the diagram and map entries to nodes, under `fence` if given, and
        resolve the session's open offload-l2 failures; `VersionConflict` if the version moved,
        `StaleFencingToken` if the fence is old."""

    # -- failures ----------------------------------------------------------------------------
    def record_failures(self, failures: Sequence[Failure]) -> None:
        """Keep failure records of the offload stages (their ids are new), in one transaction."""
