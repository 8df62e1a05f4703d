"""Tenant-local full-text statistics: every indexed word carries its tenant's code.

FTS5 ranks by BM25, whose document frequencies are counted over the whole index. With all
tenants in one index, one tenant's writes would change how another's words weigh, and so the
order of its hits: a side channel across tenants. So every word a tenant's rows put in the
index, and every word of its queries, is prefixed with a code of the tenant ("opening" →
"kqzbtxrdopening"): a word's document frequency, and its posting list, are the tenant's own.
The code is consonants only, which leaves Porter stemming of the word as it was (16 of the
4,052 words of the LoCoMo dev turns stem differently; index and query always agree).
What the index still shares across tenants is its row count and average row length.

The triggers that maintain the indexes call the SQL function `tenant_words(tenant, text)`,
which `connect()` registers on every connection of the store: a program writing the turns or
memories tables through another connection must register it too.
"""

from __future__ import annotations

import hashlib
import re
import sqlite3
from functools import lru_cache

_CONSONANTS = "bcdfghjklmnpqrstvwxz"
CODE_CHARS = 8
#: A word as the `unicode61` tokenizer sees one: letters and digits (the underscore separates).
_WORD = re.compile(r"[^\W_]+")


@lru_cache(maxsize=4096)
def tenant_code(tenant: str) -> str:
    """Eight consonants derived from the tenant id (20⁸ codes: a collision only merges two
    tenants' statistics; results are always checked against the tenant column)."""
    value = int.from_bytes(hashlib.blake2b(tenant.encode(), digest_size=8).digest(), "big")
    letters = []
    for _ in range(CODE_CHARS):
        value, digit = divmod(value, len(_CONSONANTS))
        letters.append(_CONSONANTS[digit])
    return "".join(letters)


def tenant_words(tenant: str | None, text: str | None) -> str | None:
    """`text` with each word prefixed by the tenant's code (separators kept, so phrases hold)."""
    if text is None or tenant is None:
        return text
    code = tenant_code(tenant)
    return _WORD.sub(lambda m: code + m.group(), text)


def register(conn: sqlite3.Connection) -> None:
    conn.create_function("tenant_words", 2, tenant_words, deterministic=True)
