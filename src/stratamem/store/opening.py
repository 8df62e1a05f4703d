"""Opening the system of record a setting names: SQLite (the embedded default) or PostgreSQL.

`STRATAMEM_STORE_URL` (or `store_url` in the config file) selects it: unset or `sqlite:PATH`
for one SQLite file, `postgresql://…` for PostgreSQL (the `postgres` extra).
Every process of a deployment opens the same URL.

`stores_of` builds every store of the system of record over one open database (`Stores`): the
library's `AsyncMemory`, the service, the worker factories (`runtime`) and the CLI all take their
stores from it, so a new record family is wired here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from stratamem.clock import Clock
from stratamem.errors import ConfigError
from stratamem.store.backlog import BacklogStore, SqlBacklogStore
from stratamem.store.core.port import Store
from stratamem.store.core.store import SqlCoreStore
from stratamem.store.evidence.port import EvidenceStore
from stratamem.store.evidence.store import SqlEvidenceStore
from stratamem.store.layers.port import LayerStore
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.lineage.port import LineageStore
from stratamem.store.lineage.store import SqlLineageStore
from stratamem.store.offload.port import OffloadStore
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.sql import SqlStore
from stratamem.store.sqlite import SqliteStore
from stratamem.store.sqlite.readers import DEFAULT_READERS
from stratamem.store.tenants.port import TenantStore
from stratamem.store.tenants.store import SqlTenantStore

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
    def sqlite_readers(self) -> int: ...

    @property
    def pg_vector_index_min(self) -> int: ...


@dataclass(frozen=True, slots=True)
class Stores:
    """Every store of the system of record over one open database (`core`, which owns the
    connection: `close` closes it)."""

    core: RecordStore
    layers: LayerStore
    evidence: EvidenceStore
    """Completion receipts, the pipeline's execution log and retention."""
    backlog: BacklogStore
    """The layers' owed work, for the backlog scheduler."""
    offload: OffloadStore
    lineage: LineageStore | None
    """What the layers built from what, and forgetting that follows it (a SQL core store's)."""

    def tenants(self, clock: Clock | None = None) -> TenantStore:
        """Tenants and their API keys (`clock` stamps what is created; the system's by default)."""
        return SqlTenantStore(self.core, clock)

    def close(self) -> None:
        self.core.close()


def stores_of(store: RecordStore) -> Stores:
    """Every store over `store`'s database."""
    lineage = SqlLineageStore(store) if isinstance(store, SqlCoreStore) else None
    return Stores(store, SqlLayerStore(store), SqlEvidenceStore(store), SqlBacklogStore(store),
                  SqlOffloadStore(store), lineage)  # fmt: skip


def open_stores(settings: StoreSettings) -> Stores:
    """Every store over the database `settings.store_url` names (`open_store`)."""
    return stores_of(open_store(settings))


def open_store(settings: StoreSettings) -> RecordStore:
    """The store `settings.store_url` names (the SQLite file under the data directory when
    unset)."""
    return open_url(
        settings.store_url, settings.store_path, settings.sqlite_synchronous,
        settings.pg_vector_index_min, settings.sqlite_readers,
    )  # fmt: skip


def open_url(
    url: str | None, default_path: Path, synchronous: str = "normal",
    vector_index_min: int | None = None, readers: int = DEFAULT_READERS,
) -> RecordStore:  # fmt: skip
    if url is None or url.startswith(SQLITE_SCHEME):
        path = default_path if url is None else Path(url.removeprefix(SQLITE_SCHEME))
        return SqliteStore(path, synchronous, readers)
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
