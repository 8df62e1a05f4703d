from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


@pytest.fixture
async def memory(tmp_path: Path, clock: ManualClock) -> AsyncIterator[AsyncMemory]:
    settings = Settings(data_dir=tmp_path / "data", embedder="none", max_turn_chars=1000)
    core = AsyncMemory.open(settings, clock=clock)
    yield core
    await core.aclose()
