"""Export a tenant from SQLite, import it into an empty PostgreSQL store, export again: the
two exports are the same but for the store's name, and search and recall answer the same."""

from __future__ import annotations

from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.errors import InvalidInput
from tests.stores import fresh_pg_url

TENANT = "acme"


def _open(tmp_path: Path, name: str, url: str | None = None) -> AsyncMemory:
    settings = Settings(data_dir=tmp_path / name, embedder="hash:64", background_embedding=False,
                        store_url=url)  # fmt: skip
    return AsyncMemory.open(settings, clock=ManualClock(1_715_166_000.0), llm=None)


async def _filled(memory: AsyncMemory) -> None:
    await memory.capture(TENANT, "s1", [
        {"role": "user", "content": "I live in Lisbon near the old harbour."},
        {"role": "assistant", "content": "Noted."},
        {"role": "user", "content": "Please always answer in short sentences."},
    ])  # fmt: skip
    await memory.flush(TENANT, "s1")
    memory.clock.advance(60)  # type: ignore[attr-defined]
    await memory.capture(TENANT, "s2", [{"role": "user", "content": "I love sailing at dawn."}])
    await memory.flush(TENANT, "s2")
    lisbon = next(m for m in await memory.list_memories(TENANT) if "Lisbon" in m.content)
    await memory.update_memory(TENANT, lisbon.id, content="User: I live in Porto by the river.")
    await memory.flush(TENANT, "s2")
    await memory.offload_tool_results(
        TENANT,
        "s2",
        [{"call_id": "c1", "tool": "weather", "result": "sunny, 24 degrees, light wind"}],
    )
    await memory.run_offload()
    await memory.embed_pending()


async def _answers(memory: AsyncMemory) -> tuple[object, ...]:
    hits = await memory.search(TENANT, "where do I live sailing")
    recall = await memory.recall(TENANT, "where do I live?")
    return sorted(h.id for h in hits), recall.stable


@pytest.mark.postgres
async def test_an_export_loads_into_the_other_store_and_exports_the_same(
    tmp_path: Path, pg_server: str
) -> None:
    source = _open(tmp_path, "sqlite")
    await _filled(source)
    first = await source.export_tenant(TENANT)
    assert first[0]["store"] == "sqlite" and first[0]["embedding"]["model"]
    tables = {line["table"] for line in first[1:]}
    assert {"turns", "memories", "scene_versions", "profile_versions", "lineage",
            "offload_entries", "offload_refs", "layer_tenants"} <= tables  # fmt: skip
    target = _open(tmp_path, "pg", fresh_pg_url(pg_server))
    try:
        counts = await target.import_export(first)
        assert counts["turns"] == 4 and counts["memories"] >= 4
        await target.embed_pending()
        second = await target.export_tenant(TENANT)
        assert second[0]["store"] == "postgres"
        assert [{**first[0], "store": None}, *first[1:]] == [{**second[0], "store": None},
                                                              *second[1:]]  # fmt: skip
        assert await _answers(target) == await _answers(source)
        assert await target.flush(TENANT, "s1")  # nothing owed: the layers' state came along
        assert await target.list_memories(TENANT) == await source.list_memories(TENANT)
        with pytest.raises(InvalidInput):
            await target.import_export(first)  # the tenant holds data now
        renamed = await target.import_export(first, tenant="copy")
        assert renamed["memories"] == counts["memories"]
    finally:
        await target.aclose()
        await source.aclose()


def test_the_cli_exports_and_imports_a_tenant(tmp_path: Path) -> None:
    from click.testing import CliRunner  # noqa: PLC0415

    from stratamem.cli.main import cli  # noqa: PLC0415

    runner = CliRunner()
    base = ["--data-dir", str(tmp_path / "a"), "--embedder", "hash:64"]
    captured = runner.invoke(
        cli,
        [
            *base,
            "capture",
            "--tenant",
            TENANT,
            "--session",
            "s1",
            "--text",
            "I live in Lisbon near the harbour.",
        ],
    )
    assert captured.exit_code == 0, captured.output
    out = tmp_path / "acme.jsonl"
    exported = runner.invoke(cli, [*base, "export", "--tenant", TENANT, "--out", str(out)])
    assert exported.exit_code == 0, exported.output
    other = ["--data-dir", str(tmp_path / "b"), "--embedder", "hash:64"]
    loaded = runner.invoke(cli, [*other, "import-export", str(out), "--tenant", "copy"])
    assert loaded.exit_code == 0, loaded.output
    assert '"turns": 1' in loaded.output
    again = runner.invoke(cli, [*other, "export", "--tenant", "copy"])
    assert "Lisbon" in again.output and '"tenant": "copy"' in again.output
