"""Prefer what the person named in the query said.

"What did Caroline research?" is answered by Caroline's own turns far more often than by the
turns of the people she talks to (on LoCoMo, 96 % of the evidence turns of questions naming one
speaker were said by that speaker). When exactly one speaker among the hits is named in the
query, the turns of the other speakers have their fused score scaled down; memories and turns
without a speaker are left alone. With no speaker named, or several, nothing changes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from stratamem.domain import Hit

#: Score factor of a turn said by someone other than the one speaker the query names.
OTHER_SPEAKER_FACTOR = 0.8
_WORD = re.compile(r"\w+", re.UNICODE)


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def named_speakers(query: str, hits: Sequence[Hit]) -> set[str]:
    """The speakers of `hits` whose every name word appears in `query`."""
    words = _words(query)
    speakers = {h.speaker for h in hits if h.speaker}
    return {s for s in speakers if _words(s) and _words(s) <= words}


def prefer_named_speaker(
    query: str, hits: Sequence[Hit], factor: float = OTHER_SPEAKER_FACTOR
) -> list[Hit]:
    """`hits` re-ranked with the turns of unnamed speakers scaled by `factor` (stable)."""
    named = named_speakers(query, hits)
    if len(named) != 1:
        return list(hits)
    rescored = [
        h.scored(h.score * factor) if h.speaker and h.speaker not in named else h
        for h in hits
    ]
    return sorted(rescored, key=lambda h: -h.score)
