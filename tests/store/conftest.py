"""Store implementations the contract suite runs against (`tests/stores.py`)."""

from __future__ import annotations

import pytest

from stratamem.store.base import Store
from tests.stores import StoreFactory, open_store, store_kind

__all__ = ["StoreFactory", "open_store", "store_kind"]


@pytest.fixture
def store(open_store: StoreFactory) -> Store:
    return open_store()
