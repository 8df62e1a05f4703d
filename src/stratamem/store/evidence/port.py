"""The port of the pipeline's evidence beside a `Store`, in the same database: completion
receipts and the keys that sign them (`receipts.py`), the execution log (`executions.py`), and
the retention of both (`retention.py`). What the recovery reconciler reads.

A stage's receipt is written in the transaction of its effects (the layer and offload stores'
commits); a task committed in parts (flush, offload-l2) writes its own last, here. The worker's
side of the log and of retention takes the narrower `ExecutionRecords` and `RetentionRecords`,
which this port joins.
"""

from __future__ import annotations

from typing import Protocol

from stratamem.domain import Scope
from stratamem.store.core.port import Fence
from stratamem.store.evidence.executions import ExecutionRecords
from stratamem.store.evidence.receipts import Receipt, ReceiptDraft
from stratamem.store.evidence.retention import RetentionRecords


class EvidenceStore(ExecutionRecords, RetentionRecords, Protocol):
    def receipt(self, scope: Scope, task_id: str) -> Receipt | None:
        """The completion receipt of a task (any task type), if it committed; `authentic`
        says whether its MAC verified with a live key."""

    def record_receipt(self, scope: Scope, draft: ReceiptDraft, fence: Fence | None) -> None:
        """Write a receipt alone, under `fence`: for tasks whose effects were committed in
        parts, each under its own receipt (flush, offload-l2). `LayerConflict` if it exists."""

    def rotate_receipt_key(self, now: float, retire_old: bool = False) -> str:
        """Add a new key that signs receipts from now on; the older keys still verify until
        retired (`retire_old`: retire them now, and their receipts stop verifying)."""
