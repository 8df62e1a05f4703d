"""L1 reconciliation: each new memory against its nearest existing ones → store/update/merge/skip.

Neighbours come from the same hybrid search recall uses (BM25 + vectors, fused). The plan turns
decisions into records: nothing is destroyed; an updated or merged memory is closed with
`valid_to` and `superseded_by` pointing at its successor.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from stratamem.domain import Hit, Layer, MemoryRecord, Mode, Scope
from stratamem.embed.base import Embedder
from stratamem.layers.model import Action, NewMemory, Reconciled, stable_id
from stratamem.layers.scheduling import NOVEL, RESTATES
from stratamem.layers.schemas import Decision, DecisionChecker, Reconciliation, Shown
from stratamem.layers.views import Aliases, clip, memory_line
from stratamem.llm.prompts import Prompt
from stratamem.retrieval.config import RetrievalConfig
from stratamem.retrieval.search import MAX_K, SearchRequest, hybrid_search
from stratamem.stages.checked import Items, check_items, require_some
from stratamem.store.core.port import Filters, Store
from stratamem.store.layers.port import Supersede

STAGE = "L1-reconcile"
_SHOWN_CHARS = 400
#: The fusion constant of the neighbour search (memories only; not tuned on LoCoMo).
_RRF_K = 60
#: The fused hit's score key of the memories' vector search (a cosine: unit vectors).
_VECTOR = f"{Layer.L1.value}:vector"
_WORD = re.compile(r"\w+")
#: Fused hits read per neighbour wanted, among which the most similar by vector are kept.
_POOL_FACTOR = 4


async def find_neighbours(
    store: Store,
    embedder: Embedder | None,
    scope: Scope,
    memories: Sequence[NewMemory],
    k: int,
    candidates: int,
    min_similarity: float = -1.0,
) -> list[list[MemoryRecord]]:
    """The `k` nearest current memories of each new memory, among those whose vector is at
    least `min_similarity` (cosine) from it: the hybrid search always finds some memory, and
    asking the model about one that merely shares words cost a call per batch for nothing
    (`bench/layers_cost.py`). Without an embedder every full-text neighbour counts."""
    if k == 0 or not memories:
        return [[] for _ in memories]
    vectors = None
    if embedder is not None:
        vectors = await embedder.embed([m.content for m in memories])
    config = RetrievalConfig(candidates=candidates, rrf_k=_RRF_K)
    found: list[list[MemoryRecord]] = []
    for i, memory in enumerate(memories):
        vector: np.ndarray | None = None if vectors is None else vectors[i]
        pool = k if vector is None else min(k * _POOL_FACTOR, MAX_K)
        request = SearchRequest(clip(memory.content, 2000), k=pool, layers=_L1, filters=_NOW)
        hits = await hybrid_search(store, scope, request, vector, config)
        if vector is not None:
            hits = nearest(hits, k, min_similarity)
        ids = [h.id for h in hits]
        found.append(await asyncio.to_thread(_load, store, scope, ids))
    return found


def nearest(hits: Sequence[Hit], k: int, min_similarity: float) -> list[Hit]:
    """The `k` hits most similar by vector among those at least `min_similarity` from the
    query. The fused order is the wrong one here: a memory that shares only the user's name
    and a filler word with the new one, found by all three retrievers, outranked its exact
    restatement found by two (`bench/layers_cost.py`: "I'm a nurse …, round 13" did not see
    "I'm a nurse …, round 1" at 0.94, was stored as novel and asked L2 for a run)."""
    scored = [(h.retriever_scores.get(_VECTOR, -2.0), n, h) for n, h in enumerate(hits)]
    kept = sorted((s for s in scored if s[0] >= min_similarity), key=lambda s: (-s[0], s[1]))
    return [h for _, _, h in kept[:k]]


@dataclass(frozen=True, slots=True)
class ReconcileView:
    """The aliases one reconciliation prompt shows: `N1` … for new, `E1` … for existing."""

    new: Aliases
    existing: Aliases
    near: dict[str, frozenset[str]]


def _load(store: Store, scope: Scope, ids: Sequence[str]) -> list[MemoryRecord]:
    return [store.get_memory(scope, memory_id) for memory_id in ids]


def reconcile_messages(
    prompt: Prompt, memories: Sequence[NewMemory], neighbours: Sequence[Sequence[MemoryRecord]]
) -> tuple[list[dict[str, Any]], ReconcileView]:
    existing_ids = list(dict.fromkeys(m.id for group in neighbours for m in group))
    view = ReconcileView(
        new=Aliases.of("N", [str(i) for i in range(len(memories))]),
        existing=Aliases.of("E", existing_ids),
        near={},
    )
    alias_of = view.existing.alias_of()
    lines: list[str] = []
    for i, (memory, group) in enumerate(zip(memories, neighbours, strict=True), start=1):
        lines.append(f"NEW [N{i}] ({memory.type.value}) {clip(memory.content, _SHOWN_CHARS)}")
        shown = [alias_of[m.id] for m in group]
        view.near[f"N{i}"] = frozenset(shown)
        pairs = zip(shown, group, strict=True)
        lines += [f"  EXISTING {memory_line(a, m, _SHOWN_CHARS)}" for a, m in pairs]
        lines += ["  (no similar existing memory)"] if not group else []
    messages = [
        {"role": "system", "content": prompt.text},
        {"role": "user", "content": "\n".join(lines)},
    ]
    return messages, view


def read_reply(reply: Reconciliation, view: ReconcileView, min_words: int) -> Items[Decision]:
    """The reply's decisions checked in order (`Unusable` when every one is invalid)."""
    near = {f"near:{alias}": ids for alias, ids in view.near.items()}
    check = DecisionChecker(Shown({"memories": view.new.shown(), **near}, min_words))
    return require_some(check_items(reply.decisions, check), "decision")


def decisions_from(
    decisions: Sequence[Decision], view: ReconcileView, count: int
) -> list[Reconciled]:
    """One decision per new memory; a memory the reply left out is stored as it is."""
    chosen = {int(view.new.real[d.memory]): d for d in decisions}
    out: list[Reconciled] = []
    for index in range(count):
        decision = chosen.get(index)
        if decision is None:
            out.append(Reconciled(index, Action.STORE))
            continue
        targets = tuple(view.existing.real[t] for t in decision.targets)
        action = Action(decision.action)
        out.append(Reconciled(index, action, () if action is Action.SKIP else targets,
                              decision.content))  # fmt: skip
    return out


def to_ask(
    memories: Sequence[NewMemory], neighbours: Sequence[Sequence[MemoryRecord]]
) -> list[int]:
    """The new memories the model is asked about: those with a neighbour, but not an exact
    repeat of one (its answer could only be skip: the offline rule says it without a call)."""
    return [i for i, (memory, group) in enumerate(zip(memories, neighbours, strict=True))
            if group and repeated(memory, group) is None]  # fmt: skip


def repeated(memory: NewMemory, group: Sequence[MemoryRecord]) -> MemoryRecord | None:
    """The existing memory of `group` whose text is the new one's (case and spacing aside)."""
    key = _norm(memory.content)
    return next((m for m in group if _norm(m.content) == key), None)


def restates(memory: NewMemory, group: Sequence[MemoryRecord]) -> bool:
    """Whether an existing memory of `group` has every word of the new one, numbers aside:
    kept beside it, the new one restates it (`bench/layers_cost.py`: "… round 13" beside
    "… round 1"). A changed number the model did not call an update ("Priya is 35" beside
    "Priya is 34", stored) counts as one too; an update or merge never does (it is novel)."""
    words = _words(memory.content)
    return any(words <= _words(m.content) for m in group)


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if not w.isdigit()}


def offline_decisions(
    memories: Sequence[NewMemory], neighbours: Sequence[Sequence[MemoryRecord]]
) -> list[Reconciled]:
    """Deterministic: skip a memory whose text an existing one already has (naming it: the
    turn's ledger lists it as the turn's memory), store the rest."""
    out: list[Reconciled] = []
    for index, (memory, group) in enumerate(zip(memories, neighbours, strict=True)):
        same = repeated(memory, group)
        out.append(Reconciled(index, Action.STORE) if same is None
                   else Reconciled(index, Action.SKIP, (same.id,)))  # fmt: skip
    return out


def unique(memories: Sequence[NewMemory]) -> list[NewMemory]:
    """The proposed memories without repeats of the same text within the batch."""
    seen: set[str] = set()
    out: list[NewMemory] = []
    for memory in memories:
        key = _norm(memory.content)
        if key not in seen:
            seen.add(key)
            out.append(memory)
    return out


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


@dataclass(frozen=True, slots=True)
class L1Plan:
    memories: list[MemoryRecord]
    supersedes: list[Supersede]
    counts: dict[str, int]
    made: dict[int, tuple[str, ...]] = field(default_factory=dict)
    """Per proposed memory (by index): the memory it became, or the existing ones a repeat
    was skipped for (what the turn ledger names as the turn's memories)."""


def plan(
    scope: Scope,
    session: str,
    memories: Sequence[NewMemory],
    decisions: Sequence[Reconciled],
    existing: dict[str, MemoryRecord],
    id_seed: str,
    now: float,
    mode: Mode,
    made_by: str = "",
    near: Collection[int] = (),
    restated: Collection[int] = (),
) -> L1Plan:
    """Records to write: new memories (ids from `id_seed`) and the versions they close.

    `made_by` (a prompt tag such as `l1_extract@v1`) goes into each memory's metadata; a memory
    of `near` (indices that had a near neighbour) stored as a memory of its own is marked not
    novel there (`scheduling.NOVEL`: the L2 schedule counts novel ones), and one of `restated`
    (`restates`: a neighbour has all its words) as a restatement (`scheduling.RESTATES`).
    """
    out = L1Plan([], [], {a.value: 0 for a in Action})
    for decision in decisions:
        out.counts[decision.action.value] += 1
        if decision.action is Action.SKIP:
            out.made[decision.index] = tuple(decision.targets)
            continue
        memory = memories[decision.index]
        new_id = stable_id("m", scope.tenant, id_seed, decision.index)
        olds = [existing[t] for t in decision.targets]
        record = _record(scope, session, memory, olds, new_id, decision.content, now, mode)
        if made_by:
            record = replace(record, metadata={**record.metadata, "made_by": made_by})
        if decision.index in near and not olds:
            marks = {NOVEL: False, **({RESTATES: True} if decision.index in restated else {})}
            record = replace(record, metadata={**record.metadata, **marks})
        out.memories.append(record)
        out.made[decision.index] = (new_id,)
        out.supersedes.extend(Supersede(old.id, new_id) for old in olds)
    return out


def _record(
    scope: Scope,
    session: str,
    memory: NewMemory,
    olds: Sequence[MemoryRecord],
    new_id: str,
    content: str | None,
    now: float,
    mode: Mode,
) -> MemoryRecord:
    sources = tuple(dict.fromkeys([*(s for o in olds for s in o.source_turn_ids),
                                   *memory.source_turn_ids]))  # fmt: skip
    starts = [t for t in (memory.activity_start, *(o.activity_start for o in olds)) if t]
    activity = memory.activity_start
    if activity is None:
        activity = min(starts, default=None)
    metadata: dict[str, Any] = {"supersedes": [o.id for o in olds]} if olds else {}
    return MemoryRecord(
        id=new_id,
        tenant=scope.tenant,
        type=memory.type,
        content=(content or memory.content).strip(),
        priority=max([memory.priority, *(o.priority for o in olds)]),
        source_turn_ids=sources,
        session=session,
        activity_start=activity,
        valid_from=_valid_from(memory, olds, now),
        created_at=now,
        updated_at=now,
        mode=mode,
        metadata=metadata,
    )


def _valid_from(memory: NewMemory, olds: Sequence[MemoryRecord], now: float) -> float:
    """A new memory holds from when its turn was said (never later than now); a version that
    replaces others from now, so the versions' validity never overlaps."""
    if olds or memory.said_at is None:
        return now
    return min(memory.said_at, now)


_L1 = (Layer.L1,)
_NOW = Filters()
