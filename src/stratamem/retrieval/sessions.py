"""Per-session aggregation: a second candidate list for questions whose answer is spread out.

"What activities has Melanie done with her family?" is answered by one turn in each of six
sessions, each matching the question weakly; the best-ranked turns of one session (a talk about
running) crowd them out of the top ten. Sessions are ranked by the summed fused scores of their
turns among the first `depth` hits, and the best hit of each session is added the reciprocal rank
of its session, `weight / (rrf_k + rank)`, as one more list of the fusion would add it (the
hit's ranks name it `L0:session`, its score the session's sum). A session that many hits point
at lifts its best hit; no hit is demoted, and hits without a session (a memory of no one
session) are left alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from stratamem.domain import Hit

#: Hits whose sessions are aggregated, and the weight of the sessions' list: off, because it
#: holds one conversation out on LoCoMo's turns with vectors (0.05 chosen by every fold) but
#: not with BM25 alone nor over the offline memories and turns (docs/eval-locomo.md).
SESSION_DEPTH = 20
SESSION_WEIGHT = 0.0


def session_ranked(
    hits: Sequence[Hit], weight: float, rrf_k: int, depth: int = SESSION_DEPTH
) -> list[Hit]:
    """`hits` re-ranked with each session's best hit lifted by its session's rank (stable)."""
    if weight <= 0 or not hits:
        return list(hits)
    totals: dict[str, float] = {}
    best: dict[str, int] = {}
    for index, hit in enumerate(hits[:depth]):
        if hit.session is None:
            continue
        totals[hit.session] = totals.get(hit.session, 0.0) + hit.score
        best.setdefault(hit.session, index)
    order = sorted(totals, key=lambda s: (-totals[s], best[s]))
    ranks = {best[s]: rank for rank, s in enumerate(order, start=1)}
    rescored = [
        _lifted(h, ranks[i], totals[str(h.session)], weight / (rrf_k + ranks[i]))
        if i in ranks else h
        for i, h in enumerate(hits)
    ]  # fmt: skip
    return sorted(rescored, key=lambda h: -h.score)


def _lifted(hit: Hit, rank: int, total: float, lift: float) -> Hit:
    """`hit` with the session list's rank and score among its retrievers' (`L0:session`)."""
    name = f"{hit.layer.value}:session"
    return hit.scored(
        hit.score + lift, {**hit.ranks, name: rank}, {**hit.retriever_scores, name: total}
    )
