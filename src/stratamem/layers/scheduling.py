"""When the layers run: pure decisions over a session's state (the backlog scheduler's L1
source, `layers.backlog`, applies them).

- L1 after every N new turns, warming up: the first run after 1 turn, then 2, 4, … up to
  `l1_every_turns`; after `idle_timeout_s` of quiet with turns pending, however long ago (so
  imported history is extracted too); on flush.
- L2 no sooner than `l2_delay_s` after an L1 and `l2_min_interval_s` after the last L2; the
  pipeline's timer only ever moves earlier, so the L2 executor re-arms it when it fires early.
  After the pipeline's `l2_max_interval_s` it runs again (its max-interval timer). A session's
  L2 runs only when what changed since the last one matters (`l2_worth_running`: enough novel
  memories, enough of any kind, or a scene to write again), never because time passed; the
  memories it leaves wait for the next one, a flush, or the tenant's quiet (`catch_up_quiet_s`,
  the backlog's L2 is due then).
- L3 after an L2 that changed something (the pipeline's cascade), every `l3_every_memories` new
  memories, or on request, when it is worth it (`l3_worth_running`: `l3_min_memories` new
  memories since the last L3, or scenes quiet for `catch_up_quiet_s`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from stratamem.domain import MemoryRecord
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


#: The metadata key L1 sets to false on a memory it stored although an existing one was near
#: (`l1_reconcile.plan`): a restatement or detail of what the scenes already hold.
NOVEL = "novel"
#: The metadata key L1 sets to true on a memory it stored beside an existing one that has all
#: its words, numbers aside (`l1_reconcile.restates`): a restatement.
RESTATES = "restates"


@dataclass(frozen=True, slots=True)
class L2Inputs:
    """What changed since the tenant's last L2: memories written after its mark, how many of
    them are novel (no near neighbour when written, or an update or merge of one), when the
    newest was written, and whether a scene was built from a memory corrected or forgotten
    since."""

    changed: int
    novel: int
    newest_at: float | None = None
    stale: bool = False
    last_turn_at: float | None = None
    """When the tenant's newest turn was said: a tenant still talking is not quiet, however
    long ago its last memory was written."""
    restated: int = 0
    """How many of the changed memories restate one the scenes were given (`RESTATES`)."""

    @classmethod
    def of(
        cls,
        memories: Sequence[MemoryRecord],
        stale: bool = False,
        last_turn_at: float | None = None,
    ) -> L2Inputs:
        novel = sum(1 for m in memories if m.metadata.get(NOVEL, True) is not False)
        restated = sum(1 for m in memories if m.metadata.get(RESTATES) is True)
        newest = max((m.created_at for m in memories), default=None)
        return cls(len(memories), novel, newest, stale, last_turn_at, restated)

    @property
    def active_at(self) -> float | None:
        """The tenant's newest change or turn."""
        times = [t for t in (self.newest_at, self.last_turn_at) if t is not None]
        return max(times, default=None)


def l2_worth_running(inputs: L2Inputs, now: float, settings: LayerSettings) -> bool:
    """Whether an L2 should consolidate now (a flush's always does): a scene to write again,
    `l2_min_novel` novel memories or `l2_min_changed` of any kind but restatements (a memory
    whose nearest neighbour says nearly the same adds nothing a scene lacks), or fewer, and
    restatements, once the tenant wrote none and said nothing for `catch_up_quiet_s` (a
    session whose turns come a minute apart writes memories every L1, eight turns, apart: its
    memories alone looked quiet after each L1 and every L1 cost an L2). Nothing changed:
    never, however long ago the last."""
    if inputs.stale:
        return True
    if inputs.novel >= settings.l2_min_novel:
        return True
    if inputs.changed - inputs.restated >= settings.l2_min_changed:
        return True
    active = inputs.active_at
    quiet = active is not None and now - active >= settings.catch_up_quiet_s
    return inputs.changed > 0 and quiet


def l3_worth_running(
    tenant: TenantState, newest_scene_at: float | None, now: float, settings: LayerSettings
) -> bool:
    """Whether an L3 should write the profile now (its stale profile aside): the first one,
    after `l3_min_memories` new memories (a scene updated with a few restated details changes
    little a profile says), or once the scenes have not changed for `catch_up_quiet_s`."""
    if tenant.last_l3_at is None or tenant.memories_since_l3 >= settings.l3_min_memories:
        return True
    if newest_scene_at is None or newest_scene_at <= tenant.last_l3_at:
        return tenant.memories_since_l3 > 0 and now - tenant.last_l3_at >= settings.catch_up_quiet_s
    return now - newest_scene_at >= settings.catch_up_quiet_s
