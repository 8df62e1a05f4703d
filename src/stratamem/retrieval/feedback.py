"""Pseudo-relevance feedback: words of the best first-pass hits become a second BM25 query.

"What pets does Nate have?" finds a turn about his turtles; "turtles" then finds the other
turns about them, which share no word with the question. The words are taken from the texts
of the top hits, most frequent first, leaving out stop words, short words, numbers, the query's
own words and the speakers' names. Their BM25 ranks join the fusion with a small weight.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence

from stratamem.domain import Hit
from stratamem.store.core.fts_query import STOPWORDS, query_terms

#: First-pass hits the words are taken from, how many words, the shortest word kept.
FEEDBACK_HITS = 3
FEEDBACK_TERMS = 5
MIN_TERM_CHARS = 4
#: A feedback word in this many of the tenant's rows or more is left out (as one in more than
#: `feedback_max_share` of them is): the most frequent words of the best hits are often common
#: ones, and with only a share as their bound the rows the feedback query ranks grew with the
#: tenant (5 words of up to 5,000 rows each at 100k memories: 11.4 of 20.8 ms, issue 32). The
#: LoCoMo dev tenants (about 550 turns) never reach it: there the share's floor, 200 rows,
#: is the bound, as before.
FEEDBACK_MAX_ROWS = 500
_WORD = re.compile(r"\w+", re.UNICODE)


def feedback_terms(
    query: str,
    hits: Sequence[Hit],
    from_hits: int = FEEDBACK_HITS,
    max_terms: int = FEEDBACK_TERMS,
) -> list[str]:
    """Up to `max_terms` words of the first `from_hits` hits, most frequent first."""
    known = set(query_terms(query, max_terms=1000))
    for hit in hits:
        known.update(_WORD.findall((hit.speaker or "").lower()))
    counts: Counter[str] = Counter()
    for hit in hits[:from_hits]:
        for word in _WORD.findall(hit.text.lower()):
            if _useful(word) and word not in known:
                counts[word] += 1
    return [word for word, _ in counts.most_common(max_terms)]


def _useful(word: str) -> bool:
    return len(word) >= MIN_TERM_CHARS and word not in STOPWORDS and not word.isdigit()
