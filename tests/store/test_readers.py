"""The SQLite store's read-only connections (issue 32): reads beside the writer, a gate that an
erase shuts (no read that began before it sees its rows after it), and all closed by `close`."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Layer, Scope
from stratamem.errors import StoreError
from stratamem.store.core.port import Filters
from stratamem.store.core.store import meta, set_meta
from stratamem.store.sqlite import SqliteStore
from stratamem.store.sqlite.readers import DEFAULT_READERS
from tests.store.helpers import turn

ACME = Scope("acme")
JOIN_S = 5.0  # only bounds a broken test; nothing waits on time


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SqliteStore]:
    store = SqliteStore(tmp_path / "s.db", readers=2)
    store.add_turns(ACME, [turn("a1", "my secret diagnosis is flu", session="gone"),
                           turn("k1", "I like hiking in the alps", session="kept")])  # fmt: skip
    yield store
    store.close()


class Running:
    """A call on a thread of its own, its result or error kept."""

    def __init__(self, call: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self._call = call
        self._thread = threading.Thread(target=self._run)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.result = self._call()
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            self.error = exc

    def join(self) -> Any:
        self._thread.join(JOIN_S)
        assert not self._thread.is_alive()
        if self.error is not None:
            raise self.error
        return self.result

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()


def holding(store: SqliteStore, release: threading.Event, held: list[Any]) -> Running:
    """A thread that borrows a reader, keeps it in `held`, and gives it back once released."""

    def hold() -> None:
        with store.reading() as conn:
            held.append(conn)
            release.wait()

    return Running(hold)


def pool(store: SqliteStore) -> Any:
    assert store.readers is not None
    return store.readers


def test_an_erase_waits_for_a_lent_reader_and_later_reads_never_see_its_rows(
    store: SqliteStore,
) -> None:
    readers = pool(store)
    with store.reading() as conn:
        erase = Running(lambda: store.erase_session(ACME, "gone"))
        assert readers.wait_until(lambda p: p.gate_shut, JOIN_S)
        late = Running(lambda: store.get_turns(ACME, ["a1", "k1"]))
        assert readers.wait_until(lambda p: p.queued == 1, JOIN_S)
        # Each statement of the lent reader sees the newest commit: the erase has not begun.
        assert conn.execute("SELECT count(*) FROM turns WHERE id = 'a1'").fetchone()[0] == 1
        assert not erase.done and not late.done
    assert erase.join()["turns"] == 1
    assert [t.id for t in late.join()] == ["k1"]
    assert store.search_text(ACME, Layer.L0, "secret diagnosis", Filters(), 10) == []


def test_a_thread_that_holds_a_reader_cannot_shut_the_gate(store: SqliteStore) -> None:
    with store.reading(), pytest.raises(StoreError, match="holds a reader"):
        store.erase_session(ACME, "gone")
    assert len(store.get_turns(ACME, ["a1"])) == 1  # nothing was erased


def test_reads_inside_a_write_use_the_writer_and_see_the_write(store: SqliteStore) -> None:
    with store.writing() as writer:
        set_meta(writer, "probe", "written")
        with store.reading() as conn:
            assert conn is writer
            assert meta(conn, "probe") == "written"
    with store.reading() as conn:
        assert conn is not writer
        assert meta(conn, "probe") == "written"  # committed: every reader sees it


def test_readers_only_read(store: SqliteStore) -> None:
    with store.reading() as conn, pytest.raises(sqlite3.OperationalError, match="readonly"):
        conn.execute("INSERT INTO meta (key, value) VALUES ('x', 'y')")


def test_a_nested_read_gets_the_same_reader(store: SqliteStore) -> None:
    with store.reading() as outer, store.reading() as inner:
        assert inner is outer
        assert pool(store).lent == 1


def test_the_pool_is_bounded_and_a_reader_is_lent_again(store: SqliteStore) -> None:
    readers = pool(store)
    release = threading.Event()
    held: list[sqlite3.Connection] = []
    holders = [holding(store, release, held), holding(store, release, held)]
    assert readers.wait_until(lambda p: p.lent == 2, JOIN_S)
    third = Running(lambda: store.list_turns(ACME, "kept"))
    assert readers.wait_until(lambda p: p.queued == 1, JOIN_S)
    assert not third.done
    release.set()
    for holder in holders:
        holder.join()
    assert [t.id for t in third.join()] == ["k1"]
    assert readers.opened == 2 and held[0] is not held[1]


def test_close_waits_for_lent_readers_and_closes_them_all(store: SqliteStore) -> None:
    readers = pool(store)
    release = threading.Event()
    held: list[sqlite3.Connection] = []
    holder = holding(store, release, held)
    assert readers.wait_until(lambda p: p.lent == 1, JOIN_S)
    with store.reading() as conn:
        held.append(conn)
    closing = Running(store.close)
    assert readers.wait_until(lambda p: p.gate_shut, JOIN_S)
    assert not closing.done
    release.set()
    holder.join()
    closing.join()
    assert len(held) == 2 and readers.opened == 2
    for conn in held:
        with pytest.raises(sqlite3.ProgrammingError, match="closed"):
            conn.execute("SELECT 1")
    with pytest.raises(StoreError, match="closed"):
        store.list_turns(ACME, "kept")


def test_without_readers_everything_reads_on_the_writer(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "one.db", readers=0)
    try:
        assert store.readers is None
        with store.reading() as conn, store.writing() as writer:
            assert conn is writer
        store.add_turns(ACME, [turn("a1", "my secret diagnosis is flu", session="gone")])
        store.erase_session(ACME, "gone")
        assert store.get_turns(ACME, ["a1"]) == []
    finally:
        store.close()


async def test_the_setting_reaches_the_store(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path).sqlite_readers == DEFAULT_READERS
    default = AsyncMemory.open(Settings(data_dir=tmp_path / "a"), embedder=None)
    single = AsyncMemory.open(Settings(data_dir=tmp_path / "b", sqlite_readers=0), embedder=None)
    try:
        assert isinstance(default.store, SqliteStore) and isinstance(single.store, SqliteStore)
        assert default.store.readers is not None
        assert default.store.readers.size == DEFAULT_READERS
        assert single.store.readers is None
    finally:
        await default.aclose()
        await single.aclose()


def test_readers_open_the_writers_file_after_a_change_of_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Readers open when first needed: a store opened by a relative path still reads its own
    file after the process changed its working directory (not an empty one created there)."""
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path)
    store = SqliteStore(Path("rel.db"), readers=1)
    store.add_turns(ACME, [turn("r1", "kept where it was written")])
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert [t.id for t in store.get_turns(ACME, ["r1"])] == ["r1"]
    assert not (tmp_path / "elsewhere" / "rel.db").exists()
    store.close()


async def test_with_readers_a_search_runs_its_lists_side_by_side_and_ranks_as_without(
    tmp_path: Path,
) -> None:
    """With readers, a hybrid search's vector lists run on other threads beside its full-text
    ones (each list on a reader of its own); the hits and their ranks are those of a store
    without readers, which runs them in turn."""
    found = []
    for name, readers in (("pool", DEFAULT_READERS), ("writer", 0)):
        settings = Settings(data_dir=tmp_path / name, embedder="hash:64", sqlite_readers=readers)
        memory = AsyncMemory.open(settings)
        assert memory.store.searches_in_parallel is (readers > 0)
        for i in range(40):
            words = ("hiking", "alps", "coffee", "violin", "garden")[i % 5]
            await memory.capture("acme", f"s{i % 4}", [{"role": "user", "content": f"{words} {i}"}])
            await memory.add_memory("acme", f"likes {words} number {i}")
        await memory.embed_pending()
        hits = await memory.search("acme", "hiking in the alps with coffee", k=15)
        found.append([(h.id, h.layer, sorted(h.ranks.items())) for h in hits])
        await memory.aclose()
    assert found[0] == found[1] and len(found[0]) == 15
