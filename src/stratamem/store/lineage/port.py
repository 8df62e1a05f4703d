"""The contract of the lineage records: what a memory, scene or profile version was built from
and what was built from it, and forgetting that follows it (`store.py`).

A forget runs in one transaction: it finds what the forgotten turns and memories reach
(`cascade.py`), hands what must be built again to a `Rebuilder` (a pure function the layers
supply: the offline extractive builders), and writes the result beside the deletes. So no read
ever sees a scene or profile version built from a forgotten memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from stratamem.domain import MemoryRecord, Profile, Scene, Scope, Turn
from stratamem.store.lineage.rows import Ref


@dataclass(frozen=True, slots=True)
class Forget:
    """What to forget: whole sessions, single turns, single memories (with their history)."""

    now: float
    sessions: tuple[str, ...] = ()
    turn_ids: tuple[str, ...] = ()
    memory_ids: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class SceneRebuild:
    """A scene whose current version was built from a forgotten memory: `memories` are what is
    left of its sources, `title` one no purged version chose, `version` the one to write."""

    current: Scene
    memories: list[MemoryRecord]
    title: str
    version: int


@dataclass(frozen=True, slots=True)
class Affected:
    """What a forget leaves to be built again, read inside its transaction."""

    tenant: str
    now: float
    rederive: list[tuple[MemoryRecord, list[Turn]]] = field(default_factory=list)
    scenes: list[SceneRebuild] = field(default_factory=list)
    profile_version: int | None = None
    """The profile version to write when the current one was purged (else None)."""
    profile_memories: list[MemoryRecord] = field(default_factory=list)
    """The tenant's current persona and instruction memories left, for that profile."""


@dataclass(frozen=True, slots=True)
class Rebuilt:
    replacements: dict[str, list[MemoryRecord]] = field(default_factory=dict)
    """Per re-derived memory, the memories derived again in its place."""
    scenes: list[Scene] = field(default_factory=list)
    profile: Profile | None = None
    profile_sources: list[Ref] = field(default_factory=list)


Rebuilder = Callable[[Affected], Rebuilt]


@dataclass(frozen=True, slots=True)
class Lineage:
    """A record's sources (what it was built from) and what was built from it."""

    record: Ref
    sources: list[Ref]
    derived: list[Ref]

    def to_json(self) -> dict[str, object]:
        return {
            "record": self.record.to_json(),
            "sources": [r.to_json() for r in self.sources],
            "derived": [r.to_json() for r in self.derived],
        }


class LineageStore(Protocol):
    def lineage(self, scope: Scope, record: Ref) -> Lineage:
        """`record`'s sources and what was built from it (`NotFound` when it is not stored).
        A memory's are its turns, the memories it consumed, what consumed it, and the scene and
        profile versions built from it; a scene's or the profile's (version 0: the current)."""

    def mark_stale(self, scope: Scope, memory_ids: Sequence[str], reason: str, now: float) -> int:
        """Mark the current scene and profile versions built from `memory_ids` stale
        (`rows.CORRECTED` or `rows.FORGOTTEN`); how many were marked."""

    def forget(self, scope: Scope, forget: Forget, rebuild: Rebuilder) -> dict[str, int]:
        """Erase what `forget` names and everything drawn only from it; re-derive what was
        drawn partly from it, purge every scene and profile version built from an erased
        memory and write them again (`rebuild`), with the failure records that may quote it:
        one transaction. Counts by kind (`turns`, `memories`, `other`, `rederived`,
        `rebuilt`, `purged_versions`)."""
