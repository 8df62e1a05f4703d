"""The data directory and every database file stratamem creates are private to their owner."""

from __future__ import annotations

import stat
from pathlib import Path

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.pipeline.sqlite_backend import SqliteBackend


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_a_new_data_directory_and_its_files_are_private(tmp_path: Path) -> None:
    data = tmp_path / "new" / "data"
    memory = AsyncMemory.open(Settings(data_dir=data, embedder="hash:16"), clock=ManualClock())
    backend = SqliteBackend(data / "pipeline.db")
    try:
        await memory.capture("t1", "s1", [{"role": "user", "content": "a private thought"}])
        files = sorted(p for p in data.iterdir() if p.is_file())
        assert {p.name for p in files} >= {
            "stratamem.db", "stratamem.db-wal", "stratamem.db-shm", "pipeline.db",
            "pipeline.db-wal", "pipeline.db-shm",
        }  # fmt: skip
        assert mode(data) == 0o700
        assert {p.name: mode(p) for p in files} == {p.name: 0o600 for p in files}
    finally:
        await memory.aclose()
        await backend.close()


async def test_an_existing_directory_keeps_its_mode(tmp_path: Path) -> None:
    data = tmp_path / "shared"
    data.mkdir(mode=0o750)
    data.chmod(0o750)
    memory = AsyncMemory.open(Settings(data_dir=data, embedder="none"), embedder=None)
    await memory.aclose()
    assert mode(data) == 0o750
    assert mode(data / "stratamem.db") == 0o600
