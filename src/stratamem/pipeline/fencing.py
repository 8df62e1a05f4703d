"""Fencing for the system of record: refuse writes made under a stale lock token.

Every lock grant carries a token that only grows per key. A store that accepts writes of pipeline
tasks keeps, per key, the newest token it has seen, and checks it in the same transaction as the
write: a worker that was paused, lost its lock and woke up again writes under an older token than
the worker that took over, and its write is refused with `StaleFencingToken`. The store also
keeps the owner of the grant it accepted the token from, and refuses the same token from
another owner (the backend's counter went backwards and granted it twice).

`fence_check` works on any `sqlite3` connection inside the caller's transaction (the table is
`fences(key TEXT PRIMARY KEY, token INTEGER, owner TEXT)`); other stores implement the same rule.
"""

from __future__ import annotations

import sqlite3

from stratamem.errors import StaleFencingToken
from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.task import LockGrant
from stratamem.store.core.port import Fence
from stratamem.store.fencing import check_and_record

FENCES_DDL = (
    "CREATE TABLE IF NOT EXISTS fences (key TEXT PRIMARY KEY, token INTEGER NOT NULL, owner TEXT)"
)


def ensure_fences(conn: sqlite3.Connection) -> None:
    """Create the table, or add the `owner` column to one made before it existed."""
    conn.execute(FENCES_DDL)
    columns = {str(row[1]) for row in conn.execute("PRAGMA table_info(fences)")}
    if "owner" not in columns:
        conn.execute("ALTER TABLE fences ADD COLUMN owner TEXT")


def fence_check(conn: sqlite3.Connection, key: str, token: int, owner: str | None = None) -> None:
    """Record `token` (and `owner`) for `key`, or raise `StaleFencingToken` if a newer token
    was recorded, or this one from another owner.

    Call inside the write transaction (after `BEGIN IMMEDIATE`); when it raises, roll back.
    An equal token passes from the owner it was recorded for: one lock holder may write many
    times (pass `ctx.fence_owner`). The rule lives with the store
    (`stratamem.store.fencing`); this is its form for pipeline executors.
    """
    check_and_record(conn, Fence(key, token, owner))


async def behind_the_store(
    backend: PipelineBackend, grant: LockGrant | None, refused: StaleFencingToken
) -> bool:
    """Whether the store refused `grant` because the backend's token counter went backwards
    (the backend lost its state while the store kept the tokens it accepted); if so, the
    counter is raised to the store's token first, so the next grant is above it.

    Two refusals say so: the store holds a token above the grant's and the counter is below it;
    or the store holds the grant's very token, accepted from another owner (the store accepts
    its own token from the same owner, so the counter granted it twice). Nothing of the grant
    was written in either case. The counter is then at or above the store's token (it granted
    it), and the raise only repairs it if it was lost again meanwhile.

    A refusal because a newer grant exists finds the counter at or above the store's token
    already: False, and nothing changes. Raising the counter only ever moves it up, so no grant
    made after it can be lower than a token the store accepted.
    """
    if grant is None or refused.newest is None or refused.newest < grant.token:
        return False
    raised = await backend.raise_fence(grant.key, refused.newest)
    return raised or refused.newest == grant.token


def resync_reason(grant: LockGrant | None, refused: StaleFencingToken) -> str:
    """Which of `behind_the_store`'s two refusals `refused` was, for the log."""
    if grant is not None and refused.newest == grant.token:
        return "its lock's token was granted twice: the store accepted it from another owner"
    return "its lock's token counter was behind the store"
