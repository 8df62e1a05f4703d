"""Ingest one LoCoMo sample into a memory through the public capture path."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from stratamem.core import AsyncMemory
from stratamem.datasets.locomo import Sample, evidence_ids
from stratamem.errors import InvalidInput

Timer = Callable[[], float]


@dataclass(frozen=True, slots=True)
class Ingested:
    """What ingesting a sample produced: its tenant, the turn id of every dialogue id, timings."""

    tenant: str
    turn_ids: dict[str, str]
    capture_s: float
    embed_s: float

    @property
    def turns(self) -> int:
        return len(self.turn_ids)


def normalise_dia_id(dia_id: str) -> str:
    """`D3:07` and `D:3:7` → `D3:7`, the form evidence ids are normalised to."""
    found = evidence_ids([dia_id])
    if len(found) != 1:
        raise InvalidInput(f"unreadable LoCoMo dialogue id {dia_id!r}")
    return found[0]


async def ingest_sample(memory: AsyncMemory, sample: Sample, timer: Timer) -> Ingested:
    """Capture every session of `sample` as tenant `sample_id`, then embed what is pending."""
    tenant = sample.sample_id
    turn_ids: dict[str, str] = {}
    started = timer()
    for session, messages in sample.sessions.items():
        kept = [m for m in messages if str(m["text"]).strip()]
        result = await memory.capture(tenant, session, kept)
        if len(result.ids) != len(kept):
            raise InvalidInput(f"{tenant}/{session}: capture kept {len(result.ids)} of {len(kept)}")
        for message, turn_id in zip(kept, result.ids, strict=True):
            turn_ids[normalise_dia_id(str(message["id"]))] = turn_id
    captured = timer()
    await memory.embed_pending()
    return Ingested(tenant, turn_ids, captured - started, timer() - captured)
