"""Scheduling decisions: warm-up, idle timeout at any age, L2 earliest time, L3 by count, and
whether what changed is worth an L2 or an L3."""

from __future__ import annotations

from stratamem.domain import MemoryRecord, MemoryType
from stratamem.layers import scheduling
from stratamem.layers.scheduling import Trigger
from stratamem.layers.settings import LayerSettings
from stratamem.store.layers.port import SessionState, TenantState

SETTINGS = LayerSettings(l1_every_turns=8, idle_timeout_s=300)
NOW = 1_000_000.0


def state(pending: int, runs: int = 0, quiet_s: float = 0.0) -> SessionState:
    return SessionState("t", "s", cursor_seq=10, last_seq=10 + pending,
                        last_turn_at=NOW - quiet_s, l1_runs=runs)  # fmt: skip


def test_warm_up_doubles_to_the_cap() -> None:
    assert [scheduling.l1_threshold(r, SETTINGS) for r in range(6)] == [1, 2, 4, 8, 8, 8]


def test_l1_trigger_by_turns_and_idle_at_any_age() -> None:
    assert scheduling.l1_trigger(state(1, runs=0), NOW, SETTINGS) is Trigger.TURNS
    assert scheduling.l1_trigger(state(3, runs=2), NOW, SETTINGS) is None  # needs 4
    assert scheduling.l1_trigger(state(4, runs=2), NOW, SETTINGS) is Trigger.TURNS
    assert scheduling.l1_trigger(state(3, runs=2, quiet_s=300), NOW, SETTINGS) is Trigger.IDLE
    years_ago = state(3, runs=5, quiet_s=10 * 86400)
    assert scheduling.l1_trigger(years_ago, NOW, SETTINGS) is Trigger.IDLE
    assert scheduling.l1_trigger(state(0), NOW, SETTINGS) is None


def test_l2_earliest_is_the_later_of_delay_and_min_interval() -> None:
    settings = LayerSettings(l2_delay_s=60, l2_min_interval_s=300)
    fresh = SessionState("t", "s", last_l1_at=NOW)
    assert scheduling.l2_earliest(fresh, TenantState("t"), settings) == NOW + 60
    recent_l2 = TenantState("t", last_l2_at=NOW - 100)
    assert scheduling.l2_earliest(fresh, recent_l2, settings) == NOW + 200
    old_l2 = TenantState("t", last_l2_at=NOW - 1000)
    assert scheduling.l2_earliest(fresh, old_l2, settings) == NOW + 60


def test_l3_every_k_memories() -> None:
    settings = LayerSettings(l3_every_memories=5)
    assert not scheduling.l3_due_by_count(TenantState("t", memories_since_l3=4), settings)
    assert scheduling.l3_due_by_count(TenantState("t", memories_since_l3=5), settings)


def test_l1_due_at_once_past_the_threshold_else_after_the_idle_timeout() -> None:
    assert scheduling.l1_due(state(1, runs=0), SETTINGS) == (Trigger.TURNS, float("-inf"))
    quiet = state(3, runs=2, quiet_s=30)
    assert scheduling.l1_due(quiet, SETTINGS) == (Trigger.IDLE, NOW - 30 + 300)


def test_l2_runs_on_what_changed_never_on_the_clock_alone() -> None:
    settings = LayerSettings(l2_min_novel=8, l2_min_changed=24, catch_up_quiet_s=300)
    worth = scheduling.l2_worth_running
    assert not worth(scheduling.L2Inputs(0, 0), NOW, settings)  # nothing, however long ago
    assert not worth(scheduling.L2Inputs(10, 7, newest_at=NOW - 10), NOW, settings)
    assert worth(scheduling.L2Inputs(10, 8, newest_at=NOW - 10), NOW, settings)  # novel
    assert worth(scheduling.L2Inputs(24, 0, newest_at=NOW - 10), NOW, settings)  # restated
    assert worth(scheduling.L2Inputs(1, 0, newest_at=NOW - 300), NOW, settings)  # quiet
    restatements = scheduling.L2Inputs(30, 0, newest_at=NOW - 10, restated=7)
    assert not worth(restatements, NOW, settings)  # 23 of any kind but restatements
    assert worth(scheduling.L2Inputs(31, 0, newest_at=NOW - 10, restated=7), NOW, settings)
    assert worth(restatements, NOW + 290, settings)  # the quiet consolidates them too
    assert worth(scheduling.L2Inputs(0, 0, stale=True), NOW, settings)  # a scene to rewrite


def test_a_tenant_still_talking_is_not_quiet() -> None:
    """Few changes wait for the quiet of the tenant, not of its memories: with turns a minute
    apart an L1 (eight turns) writes memories eight minutes apart, and each L1 cost an L2."""
    settings = LayerSettings(l2_min_novel=8, l2_min_changed=24, catch_up_quiet_s=300)
    worth = scheduling.l2_worth_running
    talking = scheduling.L2Inputs(3, 3, newest_at=NOW - 400, last_turn_at=NOW - 60)
    assert not worth(talking, NOW, settings)
    assert worth(talking, NOW + 240, settings)  # then quiet for 300 s
    assert scheduling.L2Inputs(1, 1, newest_at=NOW - 9, last_turn_at=NOW - 99).active_at == NOW - 9


def test_l2_inputs_count_as_novel_what_l1_did_not_mark_restated() -> None:
    def memory(i: int, **metadata: object) -> MemoryRecord:
        return MemoryRecord(id=f"m{i}", tenant="t", type=MemoryType.PERSONA, content="x y",
                            created_at=NOW - i, metadata=dict(metadata))  # fmt: skip

    memories = [memory(1), memory(2, novel=False), memory(3, supersedes=["m0"])]
    assert scheduling.L2Inputs.of(memories) == scheduling.L2Inputs(3, 2, newest_at=NOW - 1)
    restating = [*memories, memory(4, novel=False, restates=True)]
    assert scheduling.L2Inputs.of(restating) == scheduling.L2Inputs(4, 2, newest_at=NOW - 1,
                                                                    restated=1)  # fmt: skip


def test_l3_after_enough_memories_or_quiet_scenes() -> None:
    settings = LayerSettings(l3_min_memories=16, catch_up_quiet_s=300)
    worth = scheduling.l3_worth_running
    assert worth(TenantState("t"), None, NOW, settings)  # no profile yet
    done = NOW - 1000
    assert not worth(TenantState("t", memories_since_l3=3, last_l3_at=done), NOW - 10, NOW,
                     settings)  # fmt: skip
    assert worth(TenantState("t", memories_since_l3=16, last_l3_at=done), NOW - 10, NOW, settings)
    assert worth(TenantState("t", memories_since_l3=3, last_l3_at=done), NOW - 300, NOW, settings)
    assert not worth(TenantState("t", last_l3_at=done), done - 5, NOW, settings)  # nothing new
