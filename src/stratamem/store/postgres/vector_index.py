"""Per-tenant HNSW indexes on pgvector: built when a tenant outgrows the exact search.

A tenant with `ANN_MIN_VECTORS` vectors or more in a layer gets a partial HNSW index of its own
(`... USING hnsw ((embedding::vector(DIM)) vector_ip_ops) WHERE tenant = '<tenant>'`), built
with `CREATE INDEX CONCURRENTLY` (writes go on meanwhile) on a connection of its own, under a
session advisory lock so one process builds it. Until the build is recorded in
`vector_indexes`, the tenant is searched exactly. An interrupted build leaves an invalid index,
dropped by the next build. Erasing the tenant forgets its record (its searches are exact again)
and drops the index afterwards; a new embedding model drops every index.
"""

from __future__ import annotations

import hashlib
import time
from typing import Any

import psycopg
from psycopg import sql

from stratamem.domain import Layer
from stratamem.store.postgres.connection import PgConn
from stratamem.store.postgres.vector_rows import RECORD_TABLES, VECTOR_TABLES
from stratamem.store.postgres.vector_search import AnnIndex

#: Vectors (pieces) of a tenant in a layer from which it gets its own index: below it the exact
#: search is as fast (docs/deployment.md has the figures).
ANN_MIN_VECTORS = 20_000
HNSW_M = 16
HNSW_EF_CONSTRUCTION = 64
BUILD_MEMORY = "256MB"


def index_name(tenant: str, layer: Layer) -> str:
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:20]
    return f"{VECTOR_TABLES[layer]}_ann_{digest}"


def built(conn: PgConn, tenant: str, layer: Layer) -> AnnIndex | None:
    row = conn.execute(
        "SELECT dim, pieces_per_record FROM vector_indexes WHERE tenant = ? AND layer = ?",
        (tenant, layer.value),
    ).fetchone()
    return None if row is None else AnnIndex(int(row[0]), float(row[1]))


def vector_count(conn: PgConn, tenant: str, layer: Layer) -> int:
    row = conn.execute(
        f"SELECT count(*) FROM {VECTOR_TABLES[layer]} WHERE tenant = ?", (tenant,)
    ).fetchone()
    return int(row[0])


def build(raw: psycopg.Connection[Any], tenant: str, layer: Layer, dim: int) -> bool:
    """Build and record the tenant's index (`raw` in autocommit, a connection of its own);
    False when another connection is building it."""
    lock = f"vector-index/{layer.value}/{tenant}"
    locked = raw.execute("SELECT pg_try_advisory_lock(hashtextextended(%s, 0))", (lock,))
    if not (row := locked.fetchone()) or not row[0]:
        return False
    try:
        known = PgConn(raw).execute(
            "SELECT dim FROM vector_indexes WHERE tenant = ? AND layer = ?", (tenant, layer.value)
        ).fetchone()
        if known is not None and int(known[0]) == dim:
            return True
        _create(raw, tenant, layer, dim)
        _record(PgConn(raw), tenant, layer, dim)
        return True
    finally:
        raw.execute("SELECT pg_advisory_unlock(hashtextextended(%s, 0))", (lock,))


def _create(raw: psycopg.Connection[Any], tenant: str, layer: Layer, dim: int) -> None:
    name = sql.Identifier(index_name(tenant, layer))
    raw.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(name))
    raw.execute(sql.SQL("SET maintenance_work_mem = {}").format(sql.Literal(BUILD_MEMORY)))
    create = sql.SQL(
        "CREATE INDEX CONCURRENTLY {name} ON {table} USING hnsw"
        " ((embedding::vector({dim})) vector_ip_ops) WITH (m = {m}, ef_construction = {ef})"
        " WHERE tenant = {tenant}"
    )
    raw.execute(create.format(
        name=name, table=sql.Identifier(VECTOR_TABLES[layer]), dim=sql.Literal(dim),
        m=sql.Literal(HNSW_M), ef=sql.Literal(HNSW_EF_CONSTRUCTION), tenant=sql.Literal(tenant),
    ))  # fmt: skip


def _record(conn: PgConn, tenant: str, layer: Layer, dim: int) -> None:
    vectors = vector_count(conn, tenant, layer)
    records = conn.execute(
        f"SELECT count(*) FROM {RECORD_TABLES[layer]} WHERE tenant = ? AND emb_seq IS NOT NULL",
        (tenant,),
    ).fetchone()
    conn.execute(
        "INSERT INTO vector_indexes (tenant, layer, dim, name, pieces_per_record, built_at)"
        " VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, layer) DO UPDATE SET dim = excluded.dim,"
        " name = excluded.name, pieces_per_record = excluded.pieces_per_record,"
        " built_at = excluded.built_at",
        (tenant, layer.value, dim, index_name(tenant, layer),
         vectors / max(1, int(records[0])), time.time()),
    )  # fmt: skip


def forget(conn: PgConn, tenant: str | None) -> list[str]:
    """Forget the indexes of a tenant (None: of every tenant), in the caller's transaction;
    returns their names, for `drop` once it has committed."""
    where, params = ("WHERE tenant = ?", [tenant]) if tenant is not None else ("", [])
    rows = conn.execute(f"DELETE FROM vector_indexes {where} RETURNING name", params).fetchall()
    return [str(row[0]) for row in rows]


def drop(raw: psycopg.Connection[Any], names: list[str]) -> None:
    """Drop indexes (`raw` in autocommit, outside any transaction)."""
    for name in names:
        raw.execute(sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(name)))


def leftover(conn: PgConn) -> list[str]:
    """Every per-tenant index in the store's schema, recorded or not (a new model's vectors
    could not be written under an old dimension's index)."""
    rows = conn.execute(
        "SELECT indexname FROM pg_indexes WHERE schemaname = current_schema()"
        " AND (indexname LIKE 'turn\\_vectors\\_ann\\_%' OR indexname LIKE"
        " 'memory\\_vectors\\_ann\\_%')"
    ).fetchall()
    return [str(row[0]) for row in rows]


def drop_in_transaction(conn: PgConn, names: list[str]) -> None:
    """Drop indexes inside the caller's transaction (it locks their table until it ends)."""
    for name in names:
        conn.raw.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
