"""The SQLite store's `synchronous` level: NORMAL by default, FULL when asked, nothing else."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.errors import StoreError
from stratamem.store.sqlite import SqliteStore


def level(store: SqliteStore) -> int:
    """The writer's level (the readers never commit)."""
    with store.writing() as conn:
        return int(conn.execute("PRAGMA synchronous").fetchone()[0])


async def test_the_setting_reaches_the_store(tmp_path: Path) -> None:
    normal = AsyncMemory.open(Settings(data_dir=tmp_path / "a"), embedder=None)
    full = AsyncMemory.open(
        Settings(data_dir=tmp_path / "b", sqlite_synchronous="full"), embedder=None
    )
    try:
        assert isinstance(normal.store, SqliteStore) and isinstance(full.store, SqliteStore)
        assert (level(normal.store), level(full.store)) == (1, 2)  # NORMAL, FULL
    finally:
        await normal.aclose()
        await full.aclose()


def test_an_unknown_level_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(StoreError, match="synchronous"):
        SqliteStore(tmp_path / "x.db", synchronous="OFF")
    monkeypatch.setenv("STRATAMEM_SQLITE_SYNCHRONOUS", "off")
    with pytest.raises(ValidationError, match="sqlite_synchronous"):
        Settings()
