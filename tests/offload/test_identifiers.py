"""Caller identifiers never become paths or SQL text: path-like ids are refused, never followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from stratamem.errors import InvalidIdentifier, InvalidInput, NotFound
from stratamem.offload import ToolPair

from .conftest import Rig

T, S = "acme", "sess-1"
EVIL = ["../../x", "/etc/passwd", "a/b", "..", "x; DROP TABLE offload_refs", "", "a" * 200]


@pytest.mark.parametrize("call_id", EVIL)
async def test_path_like_call_ids_are_refused(offline_rig: Rig, call_id: str) -> None:
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.ingest(
            T, S, [{"call_id": call_id, "tool": "cat", "result": "secret"}]
        )


@pytest.mark.parametrize("session", EVIL)
async def test_path_like_sessions_are_refused(offline_rig: Rig, session: str) -> None:
    pair = ToolPair("c1", "cat", {}, "data", 1.0)
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.ingest(T, session, [pair])
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.user_message(T, session, "hello")
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.compact(T, session, [], 100)


async def test_refs_are_rows_not_files(offline_rig: Rig, tmp_path: Path) -> None:
    rig = offline_rig
    await rig.offload.ingest(T, S, [ToolPair("c1", "cat", {}, "the data", 1.0)])
    await rig.run()
    rig.clock.advance(60)
    await rig.run()
    [entry] = await rig.offload.entries(T, S)
    assert re.fullmatch(r"ref-[0-9a-f]{24}", entry.ref_id)  # opaque, never the caller's text
    # no file beside the store's own (none at all on PostgreSQL)
    assert {p.name for p in tmp_path.iterdir()} <= {"store.db", "store.db-shm", "store.db-wal"}
    for ref in ("../../x", "../" + entry.ref_id):
        with pytest.raises(InvalidIdentifier):
            await rig.offload.read_back(T, ref)
    with pytest.raises(NotFound):
        await rig.offload.read_back("other-tenant", entry.ref_id)  # refs are per tenant


async def test_compaction_leaves_tool_messages_with_odd_ids_alone(offline_rig: Rig) -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "../../x"}]},
        {"role": "tool", "tool_call_id": "../../x", "content": "y" * 4000},
        {"role": "user", "content": "and now?"},
    ]
    result = await offline_rig.offload.compact(T, S, messages, 1900)
    assert result.level.value == "mild"
    assert result.replaced == () and result.messages[2]["content"] == "y" * 4000


async def test_malformed_pairs_are_refused_whole(offline_rig: Rig) -> None:
    good = {"call_id": "ok1", "tool": "cat", "result": "fine"}
    for bad in ({"tool": "cat", "result": "x"}, {"call_id": "c2", "tool": "cat"},
                {"call_id": "c3", "tool": "cat", "result": "x", "params": [1]}):  # fmt: skip
        with pytest.raises(InvalidInput):
            await offline_rig.offload.ingest(T, S, [good, bad])
    assert await offline_rig.offload.entries(T, S) == []
    with offline_rig.store._store.reading() as conn:
        assert conn.execute("SELECT COUNT(*) FROM offload_pairs").fetchone()[0] == 0


@pytest.mark.parametrize("bad", EVIL)
async def test_path_like_tenants_and_message_ids_are_refused(offline_rig: Rig, bad: str) -> None:
    pair = ToolPair("c1", "cat", {}, "data", 1.0)
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.ingest(bad, S, [pair])
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.user_message(T, S, "hello", message_id=bad)
    with pytest.raises(InvalidIdentifier):
        await offline_rig.offload.read_back(bad, "ref-0123")
