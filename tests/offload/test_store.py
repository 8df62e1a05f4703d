"""The SQLite offload store: tenants apart, SQLite failures as typed errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.domain import Scope
from stratamem.errors import StoreError
from stratamem.offload import ToolPair
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.sqlite import SqliteStore


def test_tenants_never_see_each_other(offload_store: SqlOffloadStore) -> None:
    pair = ToolPair("c1", "cat", {}, "mine", 1.0)
    a, b = Scope("tenant-a"), Scope("tenant-b")
    assert offload_store.append_pairs(a, "s", [pair], 1.0).stored == ("c1",)
    assert offload_store.append_pairs(b, "s", [pair], 1.0).stored == ("c1",)
    claim = offload_store.claim_pairs(a, "s", "k1", 1.0, 60, 10)
    assert [p.call_id for p in claim.pairs] == ["c1"]
    assert offload_store.claim_pairs(a, "s", "k2", 1.0, 60, 10).pairs == ()
    assert [p.call_id for p in offload_store.claim_pairs(b, "s", "k3", 1.0, 60, 10).pairs] == [
        "c1"
    ]
    assert offload_store.boundary(b, "s").version == 0


@pytest.mark.parametrize(
    ("readers", "message"), [(0, "offload store"), (3, "the store is closed")]
)
def test_sqlite_failures_are_store_errors(tmp_path: Path, readers: int, message: str) -> None:
    """On the writer, SQLite's own error (a closed connection) comes back typed; with readers,
    the pool refuses to lend one of a closed store, typed too."""
    store = SqliteStore(tmp_path / "x.db", readers=readers)
    offload = SqlOffloadStore(store)
    store.close()
    with pytest.raises(StoreError, match=message):
        offload.list_entries(Scope("t"), "s")
