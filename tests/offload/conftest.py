"""Fixtures of the offload tests: a real store (SQLite, PostgreSQL), a manual clock, the
scripted LLM server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from stratamem.clock import CountingIdFactory, ManualClock
from stratamem.llm import LLMClient, LLMSettings
from stratamem.offload import InProcessRunner, Offload, OffloadSettings
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.opening import RecordStore
from stratamem.testing import RecordingSleep, ScriptedLLM
from tests.stores import StoreFactory


@dataclass
class Rig:
    """An offload over a real store, run in-process, with a manual clock."""

    offload: Offload
    runner: InProcessRunner
    store: SqlOffloadStore
    clock: ManualClock

    async def run(self) -> None:
        report = await self.runner.run(self.offload)
        assert report.failed == []


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(1_800_000_000.0)


@pytest.fixture
def sqlite_store(open_store: StoreFactory) -> RecordStore:
    """The store under the offload records: SQLite, then PostgreSQL (`tests/stores.py`)."""
    return open_store()


@pytest.fixture
def offload_store(sqlite_store: RecordStore) -> SqlOffloadStore:
    return SqlOffloadStore(sqlite_store)


@pytest.fixture
async def llm(scripted_llm: ScriptedLLM) -> AsyncIterator[LLMClient]:
    settings = LLMSettings(base_url=scripted_llm.base_url, model="scripted-chat", max_attempts=1)
    async with LLMClient(settings, sleep=RecordingSleep()) as client:
        yield client


def make_rig(
    store: SqlOffloadStore,
    clock: ManualClock,
    llm: LLMClient | None,
    **settings: object,
) -> Rig:
    runner = InProcessRunner(clock)
    offload = Offload(
        store,
        runner,
        llm=llm,
        settings=OffloadSettings(**settings),  # type: ignore[arg-type]
        clock=clock,
        ids=CountingIdFactory("claim"),
    )
    return Rig(offload, runner, store, clock)


@pytest.fixture
def rig(offload_store: SqlOffloadStore, clock: ManualClock, llm: LLMClient) -> Rig:
    return make_rig(offload_store, clock, llm)


@pytest.fixture
def offline_rig(offload_store: SqlOffloadStore, clock: ManualClock) -> Rig:
    return make_rig(offload_store, clock, None)
