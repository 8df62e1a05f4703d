"""The PostgreSQL store (the `postgres` extra: psycopg 3, psycopg_pool, pgvector)."""

from stratamem.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
