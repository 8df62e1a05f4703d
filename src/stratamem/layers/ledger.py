"""What each turn an L1 run settled came to (the turn ledger, `store.layers.ledger`).

A settled turn is `quarantined` when its open record names it; else `extracted` when a
proposed memory cites it (its memories: what they became after reconciliation); else
`refused` when only refused items cited it; else `nothing_to_remember`: an accepted extraction
looked at it and proposed nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from stratamem.domain import Scope, Turn
from stratamem.layers.model import NewMemory
from stratamem.store.failures.records import Failure, FailureKind
from stratamem.store.layers.ledger import OUTCOMES, Outcome, TurnOutcome
from stratamem.store.layers.port import LayerStore


def l1_outcomes(
    settled: Sequence[Turn],
    memories: Sequence[NewMemory],
    proposed: Sequence[NewMemory],
    made: Mapping[int, tuple[str, ...]],
    failures: Sequence[Failure],
    task_id: str,
    now: float,
) -> list[TurnOutcome]:
    """The outcome of each of `settled`. `memories` are every memory the run read, `proposed`
    the unique ones reconciled, `made` what each of those became (`L1Plan.made`), `failures`
    the run's quarantines and notes."""
    became = {_norm(m.content): made.get(i, ()) for i, m in enumerate(proposed)}
    memory_ids: dict[str, list[str]] = {}
    for memory in memories:
        for turn_id in memory.source_turn_ids:
            memory_ids.setdefault(turn_id, []).extend(became.get(_norm(memory.content), ()))
    quarantined = _records_by_turn(failures, FailureKind.QUARANTINE)
    refused = _records_by_turn(failures, FailureKind.REFUSED)
    out = []
    mine: Sequence[str]
    records: tuple[str, ...]
    for turn in settled:
        if turn.id in quarantined:
            outcome, mine, records = Outcome.QUARANTINED, (), quarantined[turn.id]
        elif turn.id in memory_ids:
            mine, records = memory_ids[turn.id], refused.get(turn.id, ())
            outcome = Outcome.EXTRACTED
        elif turn.id in refused:
            outcome, mine, records = Outcome.REFUSED, (), refused[turn.id]
        else:
            outcome, mine, records = Outcome.NOTHING, (), ()
        out.append(TurnOutcome(turn.id, turn.session, turn.seq, outcome, task_id, now,
                               tuple(dict.fromkeys(mine)), records))  # fmt: skip
    return out


def _records_by_turn(failures: Sequence[Failure], kind: FailureKind) -> dict[str, tuple[str, ...]]:
    found: dict[str, list[str]] = {}
    for failure in failures:
        if failure.kind is kind:
            for turn_id in failure.turn_ids:
                found.setdefault(turn_id, []).append(failure.id)
    return {turn_id: tuple(ids) for turn_id, ids in found.items()}


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def counted(outcomes: Sequence[TurnOutcome]) -> dict[str, int]:
    """How many of `outcomes` had each outcome, as a stage result's counts (`ledger_<name>`)."""
    counts = {f"ledger_{o.value}": 0 for o in (Outcome.EXTRACTED, Outcome.NOTHING,
                                               Outcome.REFUSED, Outcome.QUARANTINED)}  # fmt: skip
    for outcome in outcomes:
        counts[f"ledger_{outcome.outcome.value}"] += 1
    return counts


def ledger_of(
    layers: LayerStore, scope: Scope, session: str, turns: Sequence[Turn]
) -> list[TurnOutcome]:
    """Each of `turns`' (of one session) outcome: the recorded one; else `pending` past the
    cursor, `unrecorded` behind it (settled before the ledger existed)."""
    recorded = layers.turn_outcomes(scope, session, [t.id for t in turns])
    cursor = layers.session_state(scope, session).cursor_seq
    out = []
    for turn in turns:
        found = recorded.get(turn.id)
        if found is None:
            outcome = Outcome.PENDING if turn.seq > cursor else Outcome.UNRECORDED
            found = TurnOutcome(turn.id, session, turn.seq, outcome)
        out.append(found)
    return out


def totals(per_session: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    """The outcome counts of every session added up."""
    out = {o.value: 0 for o in OUTCOMES}
    for counts in per_session.values():
        for name, n in counts.items():
            out[name] = out.get(name, 0) + n
    return out
