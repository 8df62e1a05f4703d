"""Store implementations the contract suite runs against."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from stratamem.store.base import Store
from stratamem.store.sqlite import SqliteStore

StoreFactory = Callable[[], Store]


def _sqlite_factory(tmp_path: Path) -> StoreFactory:
    return lambda: SqliteStore(tmp_path / "store.db")


FACTORIES = {"sqlite": _sqlite_factory}


@pytest.fixture(params=sorted(FACTORIES))
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StoreFactory]:
    """A function that opens (or re-opens) the same store; every store it opened is closed."""
    opened: list[Store] = []
    factory = FACTORIES[request.param](tmp_path)

    def open_one() -> Store:
        store = factory()
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        store.close()


@pytest.fixture
def store(open_store: StoreFactory) -> Store:
    return open_store()
