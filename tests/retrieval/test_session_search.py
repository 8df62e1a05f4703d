"""Through the real search: the per-session list is off by default, and joins when weighted."""

from __future__ import annotations

from pathlib import Path

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Hit
from stratamem.retrieval.config import RetrievalConfig

TURNS = {
    "commute": ["the train was late", "another late train today", "the train again, late"],
    "holiday": ["we took a night train to Vienna"],
}


async def _hits(tmp_path: Path, session_weight: float | None) -> list[Hit]:
    settings = Settings(data_dir=tmp_path / "data", embedder="hash", max_turn_chars=1000)
    memory = AsyncMemory.open(settings, clock=ManualClock())
    if session_weight is not None:
        memory.retrieval = RetrievalConfig(session_weight=session_weight)
    try:
        for session, texts in TURNS.items():
            await memory.capture("acme", session, [{"role": "user", "content": t} for t in texts])
        await memory.embed_pending()
        return await memory.search("acme", "train", k=4)
    finally:
        await memory.aclose()


async def test_each_sessions_best_hit_carries_its_sessions_rank(tmp_path: Path) -> None:
    hits = await _hits(tmp_path, 0.05)
    lifted = {h.session: h.ranks["L0:session"] for h in hits if "L0:session" in h.ranks}
    assert lifted == {"commute": 1, "holiday": 2}


async def test_by_default_no_hit_has_a_session_rank(tmp_path: Path) -> None:
    hits = await _hits(tmp_path, None)
    assert len(hits) == 4
    assert not any("L0:session" in h.ranks for h in hits)
