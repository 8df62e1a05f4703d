"""When the layers run: pure decisions over a session's state (the backlog scheduler's L1
source, `layers.backlog`, applies them).

- L1 after every N new turns, warming up: the first run after 1 turn, then 2, 4, … up to
  `l1_every_turns`; after `idle_timeout_s` of quiet with turns pending, however long ago (so
  imported history is extracted too); on flush.
- L2 no sooner than `l2_delay_s` after an L1 and `l2_min_interval_s` after the last L2; the
  pipeline's timer only ever moves earlier, so the L2 executor re-arms it when it fires early.
  After the pipeline's `l2_max_interval_s` it runs again (its max-interval timer).
- L3 after an L2 that changed something (the pipeline's cascade), every `l3_every_memories` new
  memories, or on request.
"""

from __future__ import annotations

from enum import StrEnum

from stratamem.layers.settings import LayerSettings
from stratamem.store.layers.port import SessionState, TenantState


class Trigger(StrEnum):
    TURNS = "turns"
    IDLE = "idle"


def l1_threshold(l1_runs: int, settings: LayerSettings) -> int:
    """Turns that trigger the next L1: 1, 2, 4 … doubling per run, capped at `l1_every_turns`."""
    return min(1 << min(l1_runs, 30), settings.l1_every_turns)


def l1_trigger(state: SessionState, now: float, settings: LayerSettings) -> Trigger | None:
    """Why the session's L1 should run now, or None."""
    if state.pending_turns == 0 or state.last_turn_at is None:
        return None
    quiet_s = now - state.last_turn_at
    if state.pending_turns >= l1_threshold(state.l1_runs, settings):
        return Trigger.TURNS
    if quiet_s >= settings.idle_timeout_s:
        return Trigger.IDLE
    return None


def l1_due(state: SessionState, settings: LayerSettings) -> tuple[Trigger, float]:
    """When a session owing L1 is due, whatever its age: at once when the warm-up threshold of
    new turns is reached, else `idle_timeout_s` after its last turn (imported history with old
    timestamps is due at once)."""
    if state.pending_turns >= l1_threshold(state.l1_runs, settings):
        return Trigger.TURNS, float("-inf")
    return Trigger.IDLE, (state.last_turn_at or 0.0) + settings.idle_timeout_s


def l2_earliest(state: SessionState, tenant: TenantState, settings: LayerSettings) -> float:
    """The earliest time L2 may run: a delay after the last L1, a minimum after the last L2."""
    bounds = [0.0]
    if state.last_l1_at is not None:
        bounds.append(state.last_l1_at + settings.l2_delay_s)
    last_l2 = max(t for t in (state.last_l2_at, tenant.last_l2_at, 0.0) if t is not None)
    if last_l2:
        bounds.append(last_l2 + settings.l2_min_interval_s)
    return max(bounds)


def l3_due_by_count(tenant: TenantState, settings: LayerSettings) -> bool:
    return tenant.memories_since_l3 >= settings.l3_every_memories
