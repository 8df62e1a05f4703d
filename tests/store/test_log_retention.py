"""Retention of the execution log and receipts (`store/evidence/retention.py`) on a real SQLite file
and PostgreSQL: over a log holding every kind of row, pruning in small batches deletes exactly
the rows past the retention that nothing reads any more; open executions and the rows of tasks
still held stay, a kept receipt still replays, and fencing holds after the log was pruned."""

from __future__ import annotations

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Scope
from stratamem.errors import StaleFencingToken
from stratamem.store.evidence.executions import Execution, ExecutionStart
from stratamem.store.evidence.receipts import ReceiptDraft
from stratamem.store.evidence.retention import LogTable, task_ids
from stratamem.store.evidence.store import SqlEvidenceStore
from tests.stores import StoreFactory

SCOPES = (Scope("acme"), Scope("beta"))
DAY = 86_400.0
CUTOFF = 10 * DAY
HELD = {"held-old", "held-dead"}


@pytest.fixture
def evidence(open_store: StoreFactory) -> SqlEvidenceStore:
    return SqlEvidenceStore(open_store())


def _held(task_id: str) -> bool:
    return any(part in HELD for part in task_ids(task_id))


def prune(evidence: SqlEvidenceStore, table: LogTable, before: float, batch: int) -> list[int]:
    """The pipeline's loop, without its backend: page, leave out the held, delete; the number
    each batch deleted."""
    deleted, after = [], None
    while True:
        page = evidence.log_page(table, before, after, batch)
        assert len(page.rows) <= batch
        gone = [row for row in page.rows if not _held(row.task_id)]
        deleted.append(evidence.prune_log(table, gone, before))
        if page.next_after is None:
            return deleted
        after = page.next_after


def _populate(evidence: SqlEvidenceStore, clock: ManualClock) -> None:
    """Every kind of row, in two tenants, either side of the cutoff."""
    for scope in SCOPES:
        for age, at in (("old", CUTOFF - DAY), ("new", CUTOFF + DAY)):
            clock.set(at)
            for i in range(4):  # ended executions and their receipts, nothing holds them
                _ended(evidence, scope, clock, f"done-{age}-{i}", token=None)
            _ended(evidence, scope, clock, f"held-{age}", token=None)
            evidence.record_receipt(scope, ReceiptDraft(f"held-{age}.0", "L1", at), None)
            evidence.record_receipt(scope, ReceiptDraft(f"held-{age}@7", "L1", at), None)
            start = ExecutionStart(f"open-{age}", "offload-l1", "s1", None, 0, 1, None, "w0")
            evidence.start_execution(scope, start, clock)  # killed: open for good
            lock = f"k/{scope.tenant}/{age}"
            fenced = ExecutionStart(f"fenced-{age}", "L1", "s1", lock, 0, 1, 1, "w0")
            evidence.start_execution(scope, fenced, clock)
            clock.advance(1)  # a newer token of its lock fences it; neither ever ends
            newer = ExecutionStart(f"fenced-{age}", "L1", "s1", lock, 0, 2, 2, "w1")
            evidence.start_execution(scope, newer, clock)
        clock.set(CUTOFF - 2 * DAY)
        _ended(evidence, scope, clock, "held-dead", token=None)


def _ended(
    evidence: SqlEvidenceStore, scope: Scope, clock: ManualClock, task_id: str, token: int | None
) -> None:
    start = ExecutionStart(task_id, "L1", "s1", None, 0, 1, token, "w0")
    attempt = evidence.start_execution(scope, start, clock)
    evidence.record_receipt(scope, ReceiptDraft(task_id, "L1", clock.now(), attempt=attempt), None)
    evidence.end_execution(scope, attempt, "completed", clock)


def _needed(row: Execution) -> bool:
    ended = row.ended_at is not None and row.ended_at < CUTOFF
    return not ended or _held(row.attempt.task_id)


def _receipts(evidence: SqlEvidenceStore, scope: Scope) -> dict[str, float]:
    ids = [f"{kind}-{age}{part}" for kind in ("done", "held") for age in ("old", "new")
           for part in ("", "-0", "-1", "-2", "-3", ".0", "@7")] + ["held-dead"]  # fmt: skip
    found = {task_id: evidence.receipt(scope, task_id) for task_id in ids}
    return {k: r.completed_at for k, r in found.items() if r is not None}


def test_pruning_deletes_exactly_the_rows_nothing_needs(evidence: SqlEvidenceStore) -> None:
    clock = ManualClock()
    _populate(evidence, clock)
    before = {s.tenant: (evidence.executions(s), _receipts(evidence, s)) for s in SCOPES}

    executions = prune(evidence, LogTable.EXECUTIONS, CUTOFF, batch=3)
    receipts = prune(evidence, LogTable.RECEIPTS, CUTOFF, batch=3)

    assert all(n <= 3 for n in executions + receipts)
    for scope in SCOPES:
        was_logged, had = before[scope.tenant]
        assert evidence.executions(scope) == [row for row in was_logged if _needed(row)]
        assert _receipts(evidence, scope) == {
            task_id: at for task_id, at in had.items() if at >= CUTOFF or _held(task_id)
        }
    assert sum(executions) == 2 * 4 and sum(receipts) == 2 * 4  # the done-old of each tenant
    assert sum(prune(evidence, LogTable.EXECUTIONS, CUTOFF, batch=3)) == 0  # nothing more


def test_a_batch_deletes_only_rows_still_past_its_cutoff(evidence: SqlEvidenceStore) -> None:
    clock = ManualClock(CUTOFF - DAY)
    for i in range(5):
        _ended(evidence, SCOPES[0], clock, f"t{i}", token=None)
        clock.advance(1)
    page = evidence.log_page(LogTable.RECEIPTS, CUTOFF, None, 2)
    assert [row.task_id for row in page.rows] == ["t0", "t1"] and page.next_after is not None
    assert evidence.prune_log(LogTable.RECEIPTS, page.rows, before=CUTOFF - DAY) == 0
    assert evidence.prune_log(LogTable.RECEIPTS, page.rows, before=CUTOFF) == 2
    rest = evidence.log_page(LogTable.RECEIPTS, CUTOFF, page.next_after, 10)
    assert [row.task_id for row in rest.rows] == ["t2", "t3", "t4"] and rest.next_after is None


def test_a_kept_receipt_still_replays_and_fencing_outlives_the_log(
    evidence: SqlEvidenceStore,
) -> None:
    clock = ManualClock(CUTOFF - DAY)
    scope, lock = SCOPES[0], "session/acme/s1"
    _ended(evidence, scope, clock, "held-old", token=None)
    for token in (1, 2):  # two ended executions under the lock, the newest with token 2
        start = ExecutionStart(f"l{token}", "L1", "s1", lock, 0, 1, token, "w0")
        evidence.end_execution(scope, evidence.start_execution(scope, start, clock), "completed",
                             clock)  # fmt: skip
    prune(evidence, LogTable.EXECUTIONS, CUTOFF, batch=2)
    prune(evidence, LogTable.RECEIPTS, CUTOFF, batch=2)

    kept = evidence.receipt(scope, "held-old")
    assert kept is not None and kept.authentic  # a re-delivery finds it and replays
    assert [row.attempt.task_id for row in evidence.executions(scope)] == ["held-old"]
    with pytest.raises(StaleFencingToken):  # the lock's fence is in `fences`, not in the log
        evidence.start_execution(scope, ExecutionStart("l9", "L1", "s1", lock, 0, 1, 1, "w9"),
                               clock)  # fmt: skip


def _key_ids(evidence: SqlEvidenceStore) -> set[str]:
    with evidence._store.reading() as conn:
        return {str(row[0]) for row in conn.execute("SELECT id FROM receipt_keys").fetchall()}


def _signed(evidence: SqlEvidenceStore, clock: ManualClock, task_id: str) -> None:
    evidence.record_receipt(SCOPES[0], ReceiptDraft(task_id, "L1", clock.now()), None)


def test_retired_keys_go_once_no_receipt_names_them(evidence: SqlEvidenceStore) -> None:
    """Keys retired before the cutoff go when no receipt is left that they signed; the active
    key, a key not retired, one retired after the cutoff and one a kept receipt names stay."""
    clock = ManualClock(CUTOFF - 4 * DAY)
    _signed(evidence, clock, "done-a")  # signed with the first key, created on first use
    (first,) = _key_ids(evidence)
    second = evidence.rotate_receipt_key(clock.advance(1), retire_old=True)
    _signed(evidence, clock, "held-old")  # signed with the second; its task is still held
    third = evidence.rotate_receipt_key(clock.advance(1), retire_old=True)
    unused = evidence.rotate_receipt_key(clock.advance(1), retire_old=True)  # signs nothing
    live = evidence.rotate_receipt_key(CUTOFF - DAY)  # the active key; `unused` stays live
    assert _key_ids(evidence) == {first, second, third, unused, live}
    assert evidence.prune_receipt_keys(CUTOFF) == 1  # `third`: retired, and it signed nothing
    assert _key_ids(evidence) == {first, second, unused, live}

    clock.set(CUTOFF + DAY)
    active = evidence.rotate_receipt_key(clock.now(), retire_old=True)
    _signed(evidence, clock, "done-new")
    assert evidence.prune_receipt_keys(CUTOFF) == 0  # `unused` and `live`: retired since
    assert sum(prune(evidence, LogTable.RECEIPTS, CUTOFF, batch=2)) == 1  # done-a
    assert evidence.prune_receipt_keys(CUTOFF) == 1  # `first`, which signed done-a only
    assert _key_ids(evidence) == {second, unused, live, active}
    kept, new = evidence.receipt(SCOPES[0], "held-old"), evidence.receipt(SCOPES[0], "done-new")
    assert kept is not None and not kept.authentic  # as before the prune: its key is retired
    assert new is not None and new.authentic
    assert evidence.prune_receipt_keys(CUTOFF + 2 * DAY) == 2  # `unused` and `live`
    assert _key_ids(evidence) == {second, active}


def test_task_ids_of_parts() -> None:
    assert task_ids("abc") == ["abc"]
    assert task_ids("abc.2") == ["abc", "abc.2"]
    assert task_ids("abc.flush@7") == ["abc", "abc.flush", "abc.flush@7"]
