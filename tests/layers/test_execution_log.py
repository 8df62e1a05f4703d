"""The execution log (`store/evidence/executions.py`) on a real SQLite file and PostgreSQL: a
start under a newer token or of the same task fences the open execution, a fenced execution
can neither start again nor commit a receipt, and windows are read back as recorded."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.store.evidence.executions import ExecutionStart
from stratamem.store.evidence.receipts import Attempt, ReceiptDraft
from stratamem.store.evidence.store import SqlEvidenceStore
from tests.stores import StoreFactory

SCOPE = Scope("acme")
LOCK = "session/acme/s1"


@pytest.fixture
def evidence(open_store: StoreFactory) -> SqlEvidenceStore:
    return SqlEvidenceStore(open_store())


def test_a_newer_token_fences_the_open_execution_of_its_lock(evidence: SqlEvidenceStore) -> None:
    clock = ManualClock()
    first = evidence.start_execution(
        SCOPE, ExecutionStart("t1", "L1", "s1", LOCK, 0, 1, 5, "w0"), clock
    )
    clock.advance(1)
    second = evidence.start_execution(
        SCOPE, ExecutionStart("t2", "L1", "s1", LOCK, 0, 1, 6, "w1"), clock
    )
    clock.advance(1)
    evidence.end_execution(SCOPE, first, "aborted", clock)  # it learnt late that it lost the lock

    old, new = evidence.executions(SCOPE)
    assert (old.attempt, new.attempt) == (first, second)
    assert (old.fenced_at, old.ended_at, old.outcome) == (second.started_at, clock.now(), "aborted")
    assert old.end == second.started_at  # its window closed when the newer one started
    assert new.end is None
    with pytest.raises(StaleFencingToken):  # nothing starts under the stale token any more
        evidence.start_execution(
            SCOPE, ExecutionStart("t3", "L1", "s1", LOCK, 0, 1, 5, "w0"), clock
        )
    assert len(evidence.executions(SCOPE)) == 2
    evidence.end_execution(SCOPE, second, "completed", clock)
    assert evidence.executions(SCOPE, "t2")[0].end == clock.now()


def test_a_fenced_execution_of_a_lockless_task_commits_nothing(evidence: SqlEvidenceStore) -> None:
    clock = ManualClock()
    start = ExecutionStart("t1", "offload-l15", "s1", None, 0, 1, None, "w0")
    first = evidence.start_execution(SCOPE, start, clock)
    clock.advance(2)  # its delivery was reclaimed: the task runs again elsewhere
    second = evidence.start_execution(SCOPE, replace(start, delivery=2, worker="w1"), clock)
    clock.advance(1)
    with pytest.raises(StaleFencingToken):
        evidence.record_receipt(SCOPE, ReceiptDraft("t1", "offload-l15", clock.now(),
                                                  attempt=first), None)  # fmt: skip
    evidence.record_receipt(SCOPE, ReceiptDraft("t1", "offload-l15", clock.now(), attempt=second),
                          None)  # fmt: skip

    old, new = evidence.executions(SCOPE, "t1")
    assert (old.committed_at, old.end) == (None, second.started_at)
    assert new.committed_at == clock.now()
    receipt = evidence.receipt(SCOPE, "t1")
    assert receipt is not None and receipt.authentic and receipt.attempt == second


def test_work_the_log_never_saw_still_commits(evidence: SqlEvidenceStore) -> None:
    unseen = Attempt("t9", 0, 1, None, "elsewhere", 10.0)
    evidence.record_receipt(SCOPE, ReceiptDraft("t9", "flush", 11.0, attempt=unseen), None)
    assert evidence.receipt(SCOPE, "t9") is not None
    assert evidence.executions(SCOPE) == []


def test_an_attempts_json_is_its_fields_in_order() -> None:
    """What the Redis stamp script fills the grant's token into (`"token": 0,`) and receipts
    sign: every field, in the dataclass's order, and read back the same."""
    attempt = Attempt("t1", 2, 3, None, "w", 12.5)
    assert list(attempt.to_json().items()) == list(asdict(attempt).items())
    assert Attempt.from_json(attempt.to_json()) == attempt
