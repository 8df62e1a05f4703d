"""`reindex` with an embedder whose vector width is known only once its model is loaded or its
endpoint answered (`onnx:DIR`, `openai:MODEL` without `embed_dim`): the command that the
embedding-mismatch error names must work with it."""

from __future__ import annotations

from pathlib import Path

from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.embed import HashingEmbedder
from stratamem.testing import ScriptedLLM


async def test_reindex_learns_the_width_of_a_model_known_only_once_called(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    first = AsyncMemory.open(Settings(data_dir=data), embedder=HashingEmbedder(64), llm=None)
    await first.capture("acme", "s1", [{"role": "user", "content": "the blue bicycle"}])
    await first.aclose(drain=True)
    with ScriptedLLM(embed_dim=32) as endpoint:
        settings = Settings(
            data_dir=data, embedder="openai:scripted-embed", embed_base_url=endpoint.base_url
        )
        fixer = AsyncMemory.open(settings, verify_embedding=False, llm=None)
        assert await fixer.reindex() == 1
        await fixer.aclose()
        reopened = AsyncMemory.open(settings, llm=None)  # the store now names the endpoint
        hits = await reopened.search("acme", "bicycle")
        await reopened.aclose()
    assert "L0:vector" in hits[0].ranks
