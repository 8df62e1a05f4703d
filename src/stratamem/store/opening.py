"""Opening the system of record a setting names: SQLite (the embedded default) or PostgreSQL.

`STRATAMEM_STORE_URL` (or `store_url` in the config file) selects it: unset or `sqlite:PATH`
for one SQLite file, `postgresql://…` for PostgreSQL (the `postgres` extra).
Every process of a deployment opens the same URL.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, runtime_checkable

from stratamem.errors import ConfigError
from stratamem.store.core.port import Store
from stratamem.store.sql import SqlStore
from stratamem.store.sqlite import SqliteStore

POSTGRES_SCHEMES = ("postgresql://", "postgres://")
SQLITE_SCHEME = "sqlite:"


@runtime_checkable
class RecordStore(Store, SqlStore, Protocol):
    """A store that also lends its connection to the layer, offload and tenant records."""


class StoreSettings(Protocol):
    @property
    def store_url(self) -> str | None: ...

    @property
    def store_path(self) -> Path: ...

    @property
    def sqlite_synchronous(self) -> str: ...

    @property
    def pg_vector_index_min(self) -> int: ...


def open_store(settings: StoreSettings) -> RecordStore:
    """The store `settings.store_url` names (the SQLite file under the data directory when
    unset)."""
    return open_url(
        settings.store_url, settings.store_path, settings.sqlite_synchronous,
        settings.pg_vector_index_min,
    )  # fmt: skip


def open_url(
    url: str | None, default_path: Path, synchronous: str = "normal",
    vector_index_min: int | None = None,
) -> RecordStore:  # fmt: skip
    if url is None or url.startswith(SQLITE_SCHEME):
        path = default_path if url is None else Path(url.removeprefix(SQLITE_SCHEME))
        return SqliteStore(path, synchronous)
    if url.startswith(POSTGRES_SCHEMES):
        return _postgres(url, vector_index_min)
    raise ConfigError(
        f"store URL {_redacted(url)!r}: expected `sqlite:PATH` or `postgresql://…`"
    )


def _postgres(url: str, vector_index_min: int | None) -> RecordStore:
    try:
        from stratamem.store.postgres import PostgresStore  # noqa: PLC0415 - optional extra
    except ImportError as exc:
        raise ConfigError(
            "a postgresql:// store needs the `postgres` extra: pip install 'stratamem[postgres]'"
        ) from exc
    return PostgresStore(url, ann_min_vectors=vector_index_min)


def _redacted(url: str) -> str:
    """The URL without a password."""
    head, at, tail = url.rpartition("@")
    return f"{head.split(':')[0]}:…@{tail}" if at else url
