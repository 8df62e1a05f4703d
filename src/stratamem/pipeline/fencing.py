"""Fencing for the system of record: refuse writes made under a stale lock token.

Every lock grant carries a token that only grows per key. A store that accepts writes of pipeline
tasks keeps, per key, the newest token it has seen, and checks it in the same transaction as the
write: a worker that was paused, lost its lock and woke up again writes under an older token than
the worker that took over, and its write is refused with `StaleFencingToken`.

`fence_check` works on any `sqlite3` connection inside the caller's transaction (the table is
`fences(key TEXT PRIMARY KEY, token INTEGER)`); other stores implement the same rule.
"""

from __future__ import annotations

import sqlite3

from stratamem.errors import StaleFencingToken
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.task import LockGrant
from stratamem.store.base import Fence
from stratamem.store.fencing_sql import check_and_record

FENCES_DDL = "CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL)"


def ensure_fences(conn: sqlite3.Connection) -> None:
    conn.execute(FENCES_DDL)


def fence_check(conn: sqlite3.Connection, key: str, token: int) -> None:
    """Record `token` for `key`, or raise `StaleFencingToken` if a newer one was recorded.

    Call inside the write transaction (after `BEGIN IMMEDIATE`); when it raises, roll back.
    Equal tokens pass: one lock holder may write many times. The rule lives with the store
    (`stratamem.store.fencing_sql`); this is its form for pipeline executors.
    """
    check_and_record(conn, Fence(key, token))


async def behind_the_store(
    backend: PipelineBackend, grant: LockGrant | None, refused: StaleFencingToken
) -> bool:
    """Whether the store refused `grant` because the backend's token counter went backwards
    (the backend lost its state while the store kept the tokens it accepted); if so, the
    counter is raised to the store's token first, so the next grant is above it.

    A refusal because a newer grant exists finds the counter at or above the store's token
    already: False, and nothing changes. Raising the counter only ever moves it up, so no grant
    made after it can be lower than a token the store accepted.
    """
    if grant is None or refused.newest is None or refused.newest <= grant.token:
        return False
    return await backend.raise_fence(grant.key, refused.newest)
