"""`stratamem migrate`: an embedded store copied into PostgreSQL answers the same searches with
the same ids, keeps versions, scenes, profile, offload refs and keys, and an interrupted copy
is finished by running it again."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stratamem.cli.main import cli
from stratamem.domain import Layer, MemoryRecord, MemoryType, Mode, Profile, Role, Scene, Scope
from stratamem.domain import Turn as T
from stratamem.embed.hashing import HashingEmbedder
from stratamem.store.core.port import NO_FILTERS, EmbeddingInfo
from stratamem.store.layers.port import Extraction, L1Commit, L2Commit, L3Commit, Supersede
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.offload.records import ClaimCommit, NewEntry, ToolPair
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.opening import RecordStore, open_url
from stratamem.store.postgres import PostgresStore
from stratamem.store.postgres.copy import copy_store
from stratamem.store.tenants.store import SqlTenantStore
from tests.stores import fresh_pg_url

pytestmark = pytest.mark.postgres
ACME, BETA = Scope("acme"), Scope("beta")
EMBEDDER = HashingEmbedder(64)
QUERIES = ["boat on the lake", "greyhound named Kasztan", "orchids", "deadline at work"]
TEXTS = ["We took the boat out on the lake.", "My greyhound is named Kasztan.",
         "I repotted the white orchids.", "Work has a deadline on Friday.",
         "The lake was calm; the boat is old."]  # fmt: skip


def _memory(memory_id: str, tenant: str, content: str, at: float) -> MemoryRecord:
    return MemoryRecord(memory_id, tenant, MemoryType.EPISODIC, content, valid_from=at,
                        created_at=at, updated_at=at, mode=Mode.LLM, session="s1")  # fmt: skip


def _embed(store: RecordStore) -> None:
    store.bind_embedding(EmbeddingInfo(EMBEDDER.model, 64))
    for layer in (Layer.L0, Layer.L1):
        pending = store.pending_embeddings(layer, 1000)
        vectors = EMBEDDER.embed_sync([t for p in pending for t in p.texts])
        store.store_embeddings(layer, [(p.tenant, p.id) for p in pending], vectors,
                               [len(p.texts) for p in pending])  # fmt: skip


def _fill(store: RecordStore) -> str:
    """Two tenants' turns, memory versions, scenes, profile, offload refs, a key; the token."""
    layers = SqlLayerStore(store)
    for scope in (ACME, BETA):
        store.add_turns(scope, [T(f"t{i}", scope.tenant, f"s{i % 2}", Role.USER, text, 100.0 + i,
                                  speaker="Ann") for i, text in enumerate(TEXTS)])  # fmt: skip
        first = [_memory(f"m{i}", scope.tenant, text, 10.0 + i) for i, text in enumerate(TEXTS)]
        layers.commit_l1(scope, L1Commit("s1", f"{scope.tenant}-l1a", 0, 2, 200.0,
                                         Extraction(first)))  # fmt: skip
        edit = Extraction([_memory("m0b", scope.tenant, "We sold the boat.", 300.0)],
                          [Supersede("m0", "m0b")])  # fmt: skip
        layers.commit_l1(scope, L1Commit("s1", f"{scope.tenant}-l1b", 2, 3, 300.0, edit))
        scene = Scene("sc1", scope.tenant, "Boats", "about boats", "body", 2.0, 1, ("m0b",))
        layers.commit_l2(scope, L2Commit(f"{scope.tenant}-l2", "s1", 0, 6, 310.0, [scene]))
        profile = Profile(scope.tenant, "likes boats", 1, 320.0)
        layers.commit_l3(scope, L3Commit(f"{scope.tenant}-l3", 320.0, profile))
        offload = SqlOffloadStore(store)
        pair = ToolPair("c1", "cat", {"path": "a"}, "the whole file", 50.0)
        offload.append_pairs(scope, "s1", [pair], 50.0)
        done = ClaimCommit("k", [NewEntry(pair, "a file", 8, Mode.LLM)],
                           {"c1": f"ref-{scope.tenant}"}, 60.0)  # fmt: skip
        offload.complete_claim(scope, "s1", done)
    _embed(store)
    tenants = SqlTenantStore(store)
    tenants.create_tenant("acme")
    return tenants.create_key("acme", "app").token


def _answers(store: RecordStore) -> dict[str, object]:
    layers, offload = SqlLayerStore(store), SqlOffloadStore(store)
    found: dict[str, object] = {}
    for scope in (ACME, BETA):
        for layer in (Layer.L0, Layer.L1):
            for query in QUERIES:
                text = store.search_text(scope, layer, query, NO_FILTERS, 10)
                vector = store.search_vector(scope, layer, EMBEDDER.embed_sync([query])[0],
                                             NO_FILTERS, 10)  # fmt: skip
                found[f"{scope.tenant}/{layer.value}/{query}"] = (
                    [c.id for c in text], [c.id for c in vector])
        found[f"{scope.tenant}/history"] = [m.id for m in layers.memory_history(scope, "m0b")]
        found[f"{scope.tenant}/changed"] = [m.id for m in layers.changed_memories(scope, 0, 99)[0]]
        found[f"{scope.tenant}/state"] = layers.session_state(scope, "s1")
        found[f"{scope.tenant}/scenes"] = layers.current_scenes(scope)
        found[f"{scope.tenant}/profile"] = layers.profile(scope)
        found[f"{scope.tenant}/ref"] = offload.get_ref(scope, f"ref-{scope.tenant}")
        found[f"{scope.tenant}/entries"] = offload.list_entries(scope, "s1")
    return found


def test_a_copied_store_answers_the_same(pg_server: str, tmp_path: Path) -> None:
    sqlite = open_url(None, tmp_path / "s.db")
    token = _fill(sqlite)
    expected = _answers(sqlite)
    sqlite.close()
    target = PostgresStore(fresh_pg_url(pg_server))
    try:
        interrupted = copy_store(tmp_path / "s.db", target, max_batches=3)
        assert interrupted.counts == {}  # stopped before the verification
        report = copy_store(tmp_path / "s.db", target)  # resumes where it stopped
        assert report.counts["turns"] == {"acme": 5, "beta": 5}
        assert report.counts["memories"] == {"acme": 6, "beta": 6}
        assert sum(report.copied.values()) < sum(
            sum(c.values()) for c in report.counts.values())  # fmt: skip
        assert _answers(target) == expected
        assert target.embedding_info() == EmbeddingInfo(EMBEDDER.model, 64)
        assert SqlTenantStore(target).tenant_for_token(token) == "acme"
        again = copy_store(tmp_path / "s.db", target)  # nothing left: copies nothing, verifies
        assert sum(again.copied.values()) == 0 and again.counts == report.counts
    finally:
        target.close()


def test_the_command_copies_and_prints_the_counts(pg_server: str, tmp_path: Path) -> None:
    sqlite = open_url(None, tmp_path / "s.db")
    sqlite.add_turns(ACME, [T("t1", "acme", "s1", Role.USER, "hello there", 1.0)])
    sqlite.close()
    result = CliRunner().invoke(
        cli, ["migrate", "--from", f"sqlite:{tmp_path / 's.db'}", "--to", fresh_pg_url(pg_server)]
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["counts"]["turns"] == {"acme": 1}


def test_the_command_refuses_what_it_cannot_copy() -> None:
    runner = CliRunner()
    wrong = runner.invoke(cli, ["migrate", "--from", "x.db", "--to", "postgresql://h/db"])
    assert wrong.exit_code != 0 and "sqlite:PATH" in wrong.output


def test_a_copied_large_tenant_gets_its_vector_index(pg_server: str, tmp_path: Path) -> None:
    """The copy decodes the vectors and builds the index of every tenant over the threshold
    (5 here); the searches through the indexes answer as SQLite's."""
    sqlite = open_url(None, tmp_path / "s.db")
    _fill(sqlite)
    expected = _answers(sqlite)
    sqlite.close()
    target = PostgresStore(fresh_pg_url(pg_server), ann_min_vectors=5, background_builds=False)
    try:
        copy_store(tmp_path / "s.db", target)
        with target.reading() as conn:
            built = conn.execute("SELECT tenant, layer FROM vector_indexes").fetchall()
        assert sorted(tuple(row) for row in built) == [
            ("acme", "L0"), ("acme", "L1"), ("beta", "L0"), ("beta", "L1")]  # fmt: skip
        assert _answers(target) == expected
    finally:
        target.close()


def test_a_target_that_serves_other_tenants_is_refused_before_anything_is_copied(
    pg_server: str, tmp_path: Path
) -> None:
    """carol's second turn was skipped because alice's row held its id, then the verification
    failed and left carol half copied; now such a target is refused up front (exit code 5)."""
    url = fresh_pg_url(pg_server)
    target = PostgresStore(url)
    try:
        target.add_turns(Scope("alice"), [T("t2", "alice", "s1", Role.USER, "alice's turn", 1.0)])
    finally:
        target.close()
    sqlite = open_url(None, tmp_path / "s.db")
    sqlite.add_turns(Scope("carol"), [T(f"t{i}", "carol", "s1", Role.USER, f"carol {i}", 1.0 + i)
                                      for i in (1, 2)])  # fmt: skip
    sqlite.close()
    result = CliRunner().invoke(cli, ["migrate", "--from", f"sqlite:{tmp_path / 's.db'}",
                                      "--to", url])  # fmt: skip
    assert result.exit_code == 5, result.output
    assert "not empty (rows in turns" in result.output and "nothing was copied" in result.output
    target = PostgresStore(url)
    try:
        with target.reading() as conn:
            rows = conn.execute("SELECT tenant, id FROM turns ORDER BY tenant, id").fetchall()
        assert [tuple(r) for r in rows] == [("alice", "t2")]
    finally:
        target.close()
