"""`SqlEvidenceStore`: the `EvidenceStore` port beside a SQL store (SQLite or PostgreSQL,
`sql.py`), sharing its connection; each write is one short transaction (under the task's fence
where it has one)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from stratamem.clock import Clock
from stratamem.domain import Scope
from stratamem.store.core.port import Fence
from stratamem.store.evidence import executions, receipt_rows, retention
from stratamem.store.evidence.executions import Execution, ExecutionStart
from stratamem.store.evidence.receipts import Attempt, Receipt, ReceiptDraft
from stratamem.store.evidence.retention import LogPage, LogRow, LogTable
from stratamem.store.sql import SqlStore


class SqlEvidenceStore:
    def __init__(self, store: SqlStore) -> None:
        self._store = store

    # -- the execution log -------------------------------------------------------------------
    def start_execution(self, scope: Scope, start: ExecutionStart, clock: Clock) -> Attempt:
        fence = None
        if start.lock_key is not None and start.token is not None:
            fence = Fence(start.lock_key, start.token, start.fence_owner)
        with self._store.writing(fence, key=scope.tenant) as conn:
            return executions.start(conn, scope.tenant, start, clock.now())

    def end_execution(self, scope: Scope, attempt: Attempt, outcome: str, clock: Clock) -> None:
        with self._store.writing(key=scope.tenant) as conn:
            executions.end(conn, scope.tenant, attempt, outcome, clock)

    def executions(
        self, scope: Scope, task_id: str | None = None, limit: int = 1000
    ) -> list[Execution]:
        with self._store.reading() as conn:
            return executions.listing(conn, scope.tenant, task_id, limit)

    # -- receipts and their keys -------------------------------------------------------------
    def receipt(self, scope: Scope, task_id: str) -> Receipt | None:
        with self._store.reading() as conn:
            return receipt_rows.read_receipt(conn, scope.tenant, task_id)

    def record_receipt(self, scope: Scope, draft: ReceiptDraft, fence: Fence | None) -> None:
        with self._store.writing(fence) as conn:
            receipt_rows.write_receipt(conn, scope.tenant, draft)

    def rotate_receipt_key(self, now: float, retire_old: bool = False) -> str:
        with self._store.writing() as conn:
            return receipt_rows.rotate_key(conn, now, retire_old)

    # -- retention ---------------------------------------------------------------------------
    def log_page(
        self, table: LogTable, before: float, after: tuple[Any, ...] | None, limit: int
    ) -> LogPage:
        with self._store.reading() as conn:
            return retention.page(conn, table, before, after, limit)

    def prune_log(self, table: LogTable, rows: Sequence[LogRow], before: float) -> int:
        with self._store.writing() as conn:
            return retention.delete(conn, table, rows, before)

    def prune_receipt_keys(self, before: float) -> int:
        with self._store.reading() as conn:
            unused = retention.unused_keys(conn, before)
        if not unused:
            return 0
        with self._store.writing() as conn:
            return retention.delete_keys(conn, unused, before)
