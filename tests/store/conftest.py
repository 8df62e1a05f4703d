"""The store the contract suites run against: each of `tests/stores.py`'s kinds."""

from __future__ import annotations

import pytest

from stratamem.store.base import Store
from tests.stores import StoreFactory

__all__ = ["StoreFactory"]


@pytest.fixture
def store(open_store: StoreFactory) -> Store:
    return open_store()
