"""A full-text search as the store is asked it (`Store.search_text`), for each database's own
index: the query's terms as the indexes hold them, and which common words `max_share` and
`max_rows` leave out. SQLite ranks them with FTS5 (`sqlite/retrieval.py`), PostgreSQL with its
term tables (`postgres/text_search.py`); both score alike (`tests/store/test_ranking_parity.py`).
"""

from __future__ import annotations

from dataclasses import dataclass

from stratamem.store.core.fts_query import phrase_terms, query_terms
from stratamem.store.core.port import Filters, TurnFieldWeights
from stratamem.store.core.tenant_words import tenant_words

#: With `max_share`, a word is only ever left out when it is in at least this many rows: below
#: that it is cheap whatever the share, and small tenants keep all their words (an explicit
#: `max_rows` below it still holds).
COMMON_FLOOR_ROWS = 200


@dataclass(frozen=True, slots=True)
class TextQuery:
    """`Store.search_text`'s arguments after the scope and layer."""

    text: str
    filters: Filters
    limit: int
    max_share: float | None = None
    phrases: bool = True
    fields: TurnFieldWeights | None = None
    max_rows: int | None = None

    def terms(self, tenant: str) -> list[str]:
        return indexed_terms(tenant, self.text, self.phrases)

    @property
    def leaves_common_out(self) -> bool:
        return self.max_share is not None or self.max_rows is not None

    def common_cap(self, tenant_rows: int) -> int:
        """How many of the tenant's rows a word may be in before `max_share` or `max_rows`
        leaves it out (all of them without either)."""
        share = 1.0 if self.max_share is None else self.max_share
        cap = max(COMMON_FLOOR_ROWS, int(tenant_rows * share))
        return cap if self.max_rows is None else min(cap, self.max_rows)


def indexed_terms(tenant: str, text: str, phrases: bool) -> list[str]:
    """The words of `text` and (with `phrases`) its adjacent pairs, as the tenant's rows hold
    them in the index (tenant-prefixed: `tenant_words.py`); repeats kept (FTS5 scores a phrase
    once per time the query names it)."""
    asked = query_terms(text) + (phrase_terms(text) if phrases else [])
    return [tenant_words(tenant, term) or term for term in asked]
