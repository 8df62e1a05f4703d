"""The backlog scheduler's store queries on a real SQLite file: only owed rows, paged by key
after a cursor, whatever the age of the work."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from stratamem.domain import MemoryRecord, MemoryType, Mode, Role, Scene, Scope, Turn
from stratamem.store.backlog import SqlBacklogStore
from stratamem.store.layers.port import L1Commit, L2Commit, L3Commit
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.offload.records import OffloadStage, ToolPair
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.sqlite import SqliteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "db.sqlite")
    yield store
    store.close()


def turns(tenant: str, session: str, count: int, at: float = 100.0) -> list[Turn]:
    return [Turn(f"{session}-{i}", tenant, session, Role.USER, f"turn {i}", at + i)
            for i in range(count)]  # fmt: skip


def memory(tenant: str, memory_id: str, at: float) -> MemoryRecord:
    return MemoryRecord(memory_id, tenant, MemoryType.PERSONA, "a fact", valid_from=at,
                        created_at=at, updated_at=at, mode=Mode.LLM)  # fmt: skip


def test_sessions_owing_l1_page_by_key_at_any_age(store: SqliteStore) -> None:
    layers, backlog = SqlLayerStore(store), SqlBacklogStore(store)
    for tenant in ("a", "b"):
        for session in ("s1", "s2", "s3"):
            store.add_turns(Scope(tenant), turns(tenant, session, 2, at=1.0))  # years ago
    layers.commit_l1(Scope("a"), L1Commit("s2", "t", 0, 2, 5.0))  # caught up: not owed
    first = backlog.sessions_owing_l1(None, 3)
    assert [(s.tenant, s.session) for s in first] == [("a", "s1"), ("a", "s3"), ("b", "s1")]
    rest = backlog.sessions_owing_l1(("b", "s1"), 3)
    assert [(s.tenant, s.session, s.pending_turns) for s in rest] == [("b", "s2", 2),
                                                                      ("b", "s3", 2)]
    store.add_turns(Scope("a"), turns("a", "s2", 3))  # one more turn (two are known ids)
    owed = {s.session: s for s in backlog.sessions_owing_l1(None, 10) if s.tenant == "a"}
    assert (owed["s2"].cursor_seq, owed["s2"].last_seq, owed["s2"].last_turn_at) == (2, 3, 102.0)
    store.erase_session(Scope("b"), "s3")
    assert ("b", "s3") not in [(s.tenant, s.session) for s in backlog.sessions_owing_l1(None, 10)]


def test_tenants_owing_l2_and_l3(store: SqliteStore) -> None:
    layers, backlog = SqlLayerStore(store), SqlBacklogStore(store)
    store.upsert_memories(Scope("a"), [memory("a", "m1", 10.0), memory("a", "m2", 20.0)])
    store.upsert_memories(Scope("b"), [memory("b", "m3", 30.0)])
    assert [(t.tenant, t.changed_at) for t in backlog.tenants_owing_l2(None, 10)] == [
        ("a", 20.0), ("b", 30.0)]  # fmt: skip
    assert [t.tenant for t in backlog.tenants_owing_l2("a", 10)] == ["b"]
    _, mark = layers.changed_memories(Scope("a"), 0, 10)
    scene = Scene("sc", "a", "Life", "s", "body", 1.0, 1, ("m1",), 40.0, 40.0, mode=Mode.LLM)
    layers.commit_l2(Scope("a"), L2Commit("l2", None, 0, mark, 40.0, [scene]))
    assert [t.tenant for t in backlog.tenants_owing_l2(None, 10)] == ["b"]
    store.upsert_memories(Scope("a"), [memory("a", "m4", 50.0)])
    assert [(t.tenant, t.last_run_at) for t in backlog.tenants_owing_l2(None, 10)] == [
        ("a", 40.0), ("b", None)]  # fmt: skip
    owed_l3 = backlog.tenants_owing_l3(None, 30, 10)
    assert [(t.tenant, t.mark, t.changed_at) for t in owed_l3] == [("a", 0.0, 40.0)]
    layers.commit_l3(Scope("a"), L3Commit("l3", 50.0, None, read_at=45.0))
    assert backlog.tenants_owing_l3(None, 30, 10) == []


def test_flush_requests_until_completed(store: SqliteStore) -> None:
    backlog = SqlBacklogStore(store)
    backlog.request_flush(Scope("a"), "s1", 10.0)
    backlog.request_flush(Scope("a"), "s2", 11.0)
    backlog.complete_flush(Scope("a"), "s1", 9.0)  # started before the request: still owed
    assert [(r.session, r.requested_at) for r in backlog.flush_requests(None, 10)] == [
        ("s1", 10.0), ("s2", 11.0)]  # fmt: skip
    backlog.complete_flush(Scope("a"), "s1", 10.0)
    assert [r.session for r in backlog.flush_requests(("a", "s1"), 10)] == ["s2"]
    assert [r.session for r in backlog.flush_requests(None, 10)] == ["s2"]


def test_offload_sessions_owing(store: SqliteStore) -> None:
    offload = SqlOffloadStore(store)
    pair = ToolPair("c1", "search", {"q": "x"}, "result", 5.0)
    offload.append_pairs(Scope("a"), "s1", [pair], 7.0)
    offload.append_pairs(Scope("b"), "s1", [pair], 8.0)
    [owed] = offload.sessions_owing(None, 10.0, 1)
    assert (owed.tenant, owed.session, owed.pending_at, owed.unjudged_mark) == ("a", "s1", 7.0,
                                                                                None)
    claim = offload.claim_pairs(Scope("b"), "s1", "claim", 10.0, 60.0, 10)
    assert len(claim.pairs) == 1
    assert offload.sessions_owing(("a", "s1"), 10.0, 10) == []  # b's pair is under a claim
    assert [o.tenant for o in offload.sessions_owing(None, 71.0, 10)] == ["a", "b"]  # expired
    # one stage's source reads that stage's rows only: no unmapped entry, no unjudged boundary
    assert offload.sessions_owing(None, 71.0, 10, [OffloadStage.L2, OffloadStage.L15]) == []
    assert len(offload.sessions_owing(None, 71.0, 10, [OffloadStage.L1])) == 2
