"""The PostgreSQL store (the `postgres` extra: psycopg 3 and psycopg_pool)."""

from stratamem.store.postgres.store import PostgresStore

__all__ = ["PostgresStore"]
