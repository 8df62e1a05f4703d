"""The failure records on a real SQLite file and PostgreSQL: written with the commits they
belong to, read tenant by tenant and paged, retried, migrated from the old `layer_failures`,
erased."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from stratamem.domain import MemoryRecord, MemoryType, Mode, Role, Scope, Turn
from stratamem.errors import LayerConflict, NotFound
from stratamem.store.evidence.store import SqlEvidenceStore
from stratamem.store.failures.records import (
    RETRYABLE,
    Failure,
    FailureKind,
    FailureQuery,
    FailureStatus,
)
from stratamem.store.layers.port import Extraction, L1Commit, L2Commit, RetryCommit
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.opening import RecordStore
from stratamem.store.sqlite import SqliteStore
from stratamem.store.sqlite.connection import connect
from stratamem.store.sqlite.migrations import MIGRATIONS, migrate
from tests.stores import StoreFactory

ACME, OTHER = Scope("acme"), Scope("other")


@pytest.fixture
def stores(open_store: StoreFactory) -> Iterator[tuple[RecordStore, SqlLayerStore]]:
    store = open_store()
    store.add_turns(ACME, [Turn(f"t{i}", "acme", "s1", Role.USER, f"turn {i}", 100.0 + i)
                           for i in range(3)])  # fmt: skip
    yield store, SqlLayerStore(store)


def record(
    kind: FailureKind,
    session: str | None = "s1",
    stage: str = "L1",
    turn_ids: tuple[str, ...] = (),
) -> Failure:
    status = FailureStatus.OPEN if kind in RETRYABLE else FailureStatus.NOTED
    return Failure("task", "acme", session, stage, f"{kind.value} failed", ("raw",), 10.0,
                   kind=kind, status=status, turn_ids=turn_ids)  # fmt: skip


def memory(memory_id: str) -> MemoryRecord:
    return MemoryRecord(memory_id, "acme", MemoryType.PERSONA, "Maria grows beans",
                        source_turn_ids=("t1",), valid_from=1.0, created_at=1.0, updated_at=1.0,
                        mode=Mode.LLM)  # fmt: skip


def made(memory_id: str) -> Extraction:
    """An extraction that made this memory."""
    return Extraction([memory(memory_id)])


def test_a_quarantine_is_written_with_the_cursor_move_or_not_at_all(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    _, layers = stores
    quarantine = record(FailureKind.QUARANTINE, turn_ids=("t1",))
    note = record(FailureKind.BATCH, turn_ids=("t0", "t1"))
    failed = Extraction(quarantined=[quarantine], notes=[note])
    with pytest.raises(LayerConflict):  # the cursor moved: nothing is written
        layers.commit_l1(ACME, L1Commit("s1", "a", 5, 3, 50.0, failed))
    assert layers.list_failures(ACME) == []
    layers.commit_l1(ACME, L1Commit("s1", "a", 0, 3, 50.0, failed))
    assert layers.session_state(ACME, "s1").cursor_seq == 3
    assert [f.id for f in layers.list_failures(ACME)] == [note.id, quarantine.id]
    assert layers.get_failure(ACME, quarantine.id) == quarantine


def test_records_are_read_by_tenant_filtered_and_paged(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    _, layers = stores
    made = [record(FailureKind.ITEM, session=f"s{i % 2}", stage="L1" if i < 4 else "L2")
            for i in range(6)]  # fmt: skip
    layers.record_failures(made)
    newest_first = [f.id for f in reversed(made)]
    assert [f.id for f in layers.list_failures(ACME, FailureQuery(limit=4))] == newest_first[:4]
    page = layers.list_failures(ACME, FailureQuery(limit=4, offset=4))
    assert [f.id for f in page] == newest_first[4:]
    assert len(layers.list_failures(ACME, FailureQuery(session="s1"))) == 3
    assert len(layers.list_failures(ACME, FailureQuery(stage="L2"))) == 2
    assert layers.list_failures(ACME, FailureQuery(kind=FailureKind.QUARANTINE)) == []
    assert layers.list_failures(OTHER) == []
    with pytest.raises(NotFound):
        layers.get_failure(OTHER, made[0].id)


def test_a_commit_resolves_its_stages_open_failures(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    _, layers = stores
    mine, elsewhere = record(FailureKind.STAGE), record(FailureKind.STAGE, session="s2")
    l2 = record(FailureKind.STAGE, stage="L2")
    layers.record_failures([mine, elsewhere, l2])
    layers.commit_l1(ACME, L1Commit("s1", "a", 0, 1, 50.0))
    assert layers.get_failure(ACME, mine.id).status is FailureStatus.RESOLVED
    assert layers.get_failure(ACME, mine.id).resolved_at == 50.0
    assert layers.get_failure(ACME, elsewhere.id).status is FailureStatus.OPEN
    assert layers.get_failure(ACME, l2.id).status is FailureStatus.OPEN


def test_a_condition_seen_again_updates_its_record(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    _, layers = stores
    first = replace(record(FailureKind.STAGE, stage="L2"), error="LLMServerError: HTTP 500 a")
    again = replace(first, id="f_again", task_id="task-2", failed_at=20.0, raws=("raw 2",),
                    error="LLMServerError: HTTP 500 b")  # fmt: skip
    other_reason = replace(first, id="f_other", error="LLMTimeout: no answer")
    other_session = replace(first, id="f_s2", session="s2")
    layers.record_failures([first])
    layers.record_failures([again, other_reason, other_session])
    assert {f.id for f in layers.list_failures(ACME)} == {first.id, "f_other", "f_s2"}
    seen = layers.get_failure(ACME, first.id)
    assert (seen.attempts, seen.failed_at, seen.seen_at) == (2, 10.0, 20.0)
    assert (seen.error, seen.task_id, seen.raws) == (again.error, "task-2", ("raw", "raw 2"))
    assert seen.to_json()["last_seen_at"] == 20.0 and seen.condition == "LLMServerError"

    layers.commit_l2(ACME, L2Commit("l2", "s1", 0, 0, 30.0))  # resolves them
    layers.record_failures([replace(first, id="f_later", failed_at=40.0)])
    assert layers.get_failure(ACME, "f_later").status is FailureStatus.OPEN  # a new condition
    assert layers.get_failure(ACME, first.id).status is FailureStatus.RESOLVED


def test_one_record_per_quarantined_turn_and_per_judged_message(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    _, layers = stores
    turn = record(FailureKind.QUARANTINE, turn_ids=("t1",))
    layers.record_failures([turn, replace(turn, id="f_t1_again", error="LLMEmptyReply: x")])
    assert [f.attempts for f in layers.list_failures(ACME)] == [2]
    judged = record(FailureKind.STAGE, stage="offload-l15")
    layers.record_failures([replace(judged, id=f"f_{mark}", detail={"mark": mark})
                            for mark in ("m1", "m2", "m1")])  # fmt: skip
    marks = layers.list_failures(ACME, FailureQuery(stage="offload-l15"))
    assert sorted((f.detail["mark"], f.attempts) for f in marks) == [("m1", 2), ("m2", 1)]
    notes = [record(FailureKind.ITEM), record(FailureKind.ITEM)]
    layers.record_failures(notes)  # noted records are each their own
    assert len(layers.list_failures(ACME, FailureQuery(kind=FailureKind.ITEM))) == 2


def test_a_retry_resolves_a_quarantine_once(stores: tuple[RecordStore, SqlLayerStore]) -> None:
    store, layers = stores
    quarantine = record(FailureKind.QUARANTINE, turn_ids=("t1",))
    layers.commit_l1(ACME, L1Commit("s1", "a", 0, 3, 50.0, Extraction(quarantined=[quarantine])))
    failed = layers.note_retry(ACME, quarantine.id, 60.0, error="still bad", raws=("again",))
    assert (failed.status, failed.attempts) == (FailureStatus.OPEN, 2)
    assert failed.raws == ("raw", "again") and failed.error == "still bad"
    layers.commit_retry(ACME, RetryCommit(quarantine.id, "retry-1", 70.0, made("m1")))
    done = layers.get_failure(ACME, quarantine.id)
    assert (done.status, done.attempts, done.resolved_at) == (FailureStatus.RESOLVED, 3, 70.0)
    assert [m.id for m in store.list_memories(ACME)] == ["m1"]
    assert SqlEvidenceStore(store).receipt(ACME, "retry-1") is not None
    with pytest.raises(LayerConflict):  # resolved already: the second retry writes nothing
        layers.commit_retry(ACME, RetryCommit(quarantine.id, "retry-2", 80.0, made("m2")))
    assert [m.id for m in store.list_memories(ACME)] == ["m1"]


def test_old_layer_failures_are_carried_over_by_the_migration(tmp_path: Path) -> None:
    conn = connect(tmp_path / "old.db")
    migrate(conn, tuple(m for m in MIGRATIONS if m.version < 12))
    conn.execute(
        "INSERT INTO layer_failures (tenant, task_id, session, stage, error, raws, failed_at)"
        " VALUES ('acme', 'task-1', 's1', 'L1', 'StageOutputRejected: no', '[\"{bad\"]', 5.0)"
    )
    conn.close()
    store = SqliteStore(tmp_path / "old.db")
    [old] = SqlLayerStore(store).list_failures(ACME)
    assert (old.kind, old.status, old.stage, old.raws) == (
        FailureKind.STAGE, FailureStatus.OPEN, "L1", ("{bad",),
    )  # fmt: skip
    assert old.id.startswith("f_") and old.task_id == "task-1"
    store.close()


def test_erasing_a_session_erases_its_failures(
    stores: tuple[RecordStore, SqlLayerStore],
) -> None:
    store, layers = stores
    layers.record_failures([record(FailureKind.STAGE), record(FailureKind.STAGE, session="s2"),
                            record(FailureKind.STAGE, session=None, stage="L3")])  # fmt: skip
    store.erase_session(ACME, "s1")
    assert {f.session for f in layers.list_failures(ACME)} == {"s2", None}
    store.erase_tenant(ACME)
    assert layers.list_failures(ACME) == []
