"""The turn ledger (migration 16): every captured turn's one L1 outcome.

- `extracted`: an accepted extraction gave memories citing the turn (`memory_ids`: the
  memories written, or the existing ones a repeat was skipped for);
- `nothing_to_remember`: an accepted extraction looked at the turn and proposed nothing for
  it (`task_id` and `at` say which call and when); such turns can be extracted again;
- `refused`: the only items proposed for the turn failed the support checks (`failure_ids`:
  the `refused` records, with the items and the reasons);
- `quarantined`: no accepted extraction covers the turn (`failure_ids`: its open record);
- `pending`: not read yet (past its session's cursor), or sent back to be read again. Pending
  turns past the cursor have no row; the others do.

A turn at or below the cursor with no row was settled before the ledger existed
(`unrecorded`). Rows are bookkeeping (ids, no text): a session's or tenant's erase removes
them with the turns.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from stratamem.store.migration import Migration
from stratamem.store.sql import SqlConn


class Outcome(StrEnum):
    EXTRACTED = "extracted"
    NOTHING = "nothing_to_remember"
    REFUSED = "refused"
    QUARANTINED = "quarantined"
    PENDING = "pending"
    UNRECORDED = "unrecorded"


#: The order outcomes are counted in.
OUTCOMES = tuple(Outcome)


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """One turn's L1 outcome, as the run that settled it recorded it."""

    turn_id: str
    session: str
    seq: int
    outcome: Outcome
    task_id: str = ""
    at: float | None = None
    memory_ids: tuple[str, ...] = ()
    failure_ids: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome.value,
            "memory_ids": list(self.memory_ids),
            "failure_ids": list(self.failure_ids),
            "task_id": self.task_id or None,
            "at": self.at,
        }


LEDGER = Migration(16, "the turn ledger: each turn's L1 outcome", """
CREATE TABLE turn_outcomes (
    tenant TEXT NOT NULL,
    session TEXT NOT NULL,
    turn_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    task_id TEXT NOT NULL,
    decided_at {float},
    memory_ids TEXT NOT NULL,
    failure_ids TEXT NOT NULL,
    PRIMARY KEY (tenant, turn_id)
);
CREATE INDEX turn_outcomes_by_session ON turn_outcomes (tenant, session, outcome, seq);
""")  # fmt: skip

_COLUMNS = "session, turn_id, seq, outcome, task_id, decided_at, memory_ids, failure_ids"


def write_outcomes(conn: SqlConn, tenant: str, outcomes: Iterable[TurnOutcome]) -> None:
    """Record each turn's outcome, replacing the one it had (a retry, a re-extraction)."""
    conn.executemany(
        f"INSERT INTO turn_outcomes (tenant, {_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (tenant, turn_id) DO UPDATE SET outcome = excluded.outcome,"
        " task_id = excluded.task_id, decided_at = excluded.decided_at,"
        " memory_ids = excluded.memory_ids, failure_ids = excluded.failure_ids",
        [
            (tenant, o.session, o.turn_id, o.seq, o.outcome.value, o.task_id, o.at,
             json.dumps(list(o.memory_ids)), json.dumps(list(o.failure_ids)))
            for o in outcomes
        ],
    )  # fmt: skip


def read_outcomes(
    conn: SqlConn, tenant: str, session: str, turn_ids: Sequence[str]
) -> dict[str, TurnOutcome]:
    """The recorded outcomes of `turn_ids` (of one session), by turn id."""
    if not turn_ids:
        return {}
    marks = ", ".join("?" for _ in turn_ids)
    rows = conn.execute(
        f"SELECT {_COLUMNS} FROM turn_outcomes WHERE tenant = ? AND session = ?"
        f" AND turn_id IN ({marks})",
        (tenant, session, *turn_ids),
    ).fetchall()
    return {row["turn_id"]: _from_row(row) for row in rows}


def turns_with(
    conn: SqlConn, tenant: str, session: str | None, outcome: Outcome, limit: int
) -> list[TurnOutcome]:
    """Turns whose outcome is `outcome` (of one session, or of the tenant), in order."""
    sql = f"SELECT {_COLUMNS} FROM turn_outcomes WHERE tenant = ? AND outcome = ?"
    params: list[object] = [tenant, outcome.value]
    if session is not None:
        sql += " AND session = ?"
        params.append(session)
    rows = conn.execute(sql + " ORDER BY session, seq LIMIT ?", (*params, limit)).fetchall()
    return [_from_row(row) for row in rows]


def count_outcomes(conn: SqlConn, tenant: str, session: str | None) -> dict[str, dict[str, int]]:
    """Per session: how many turns have each outcome (`pending` counts the turns past the
    cursor too, `unrecorded` the turns settled before the ledger)."""
    where, params = ("t.tenant = ?", [tenant]) if session is None else (
        "t.tenant = ? AND t.session = ?", [tenant, session])  # fmt: skip
    rows = conn.execute(
        "SELECT t.session AS session, CASE WHEN o.outcome IS NOT NULL THEN o.outcome"
        " WHEN t.seq > COALESCE(s.cursor_seq, 0) THEN 'pending' ELSE 'unrecorded' END AS outcome,"
        " COUNT(*) AS n FROM turns t"
        " LEFT JOIN turn_outcomes o ON o.tenant = t.tenant AND o.turn_id = t.id"
        " LEFT JOIN layer_sessions s ON s.tenant = t.tenant AND s.session = t.session"
        f" WHERE {where} GROUP BY t.session, 2 ORDER BY t.session",
        params,
    ).fetchall()
    counts: dict[str, dict[str, int]] = {}
    for row in rows:
        per = counts.setdefault(row["session"], {o.value: 0 for o in OUTCOMES})
        per[row["outcome"]] = int(row["n"])
    return counts


def _from_row(row: Any) -> TurnOutcome:
    return TurnOutcome(
        turn_id=row["turn_id"], session=row["session"], seq=int(row["seq"]),
        outcome=Outcome(row["outcome"]), task_id=row["task_id"],
        at=None if row["decided_at"] is None else float(row["decided_at"]),
        memory_ids=tuple(json.loads(row["memory_ids"])),
        failure_ids=tuple(json.loads(row["failure_ids"])),
    )  # fmt: skip
