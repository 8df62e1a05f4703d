"""The statuses workers publish, read back with whether each worker is still alive.

A worker publishes its status every pump interval while it runs (`state: running`) and once
more when it stops (`state: stopped`). A running status older than `stale_after_s` belongs to a
worker that died without stopping (killed, machine gone) or hangs: it is reported as
`unresponsive`; its running tasks are shown as `stale_running` (it no longer runs them), not as
`running`. Every status carries `age_s`, the seconds since it was published.

A status that is not `running` and older than `worker_status_expiry_s` (setting) is expired:
no longer listed, and deleted by the next worker that publishes its own status. A dead worker
is thus listed (as unresponsive) long enough to be noticed, not forever.
"""

from __future__ import annotations

import json
from typing import Any

from stratamem.pipeline.backend import PipelineBackend
from stratamem.pipeline.settings import PipelineSettings

WORKERS_SCOPE = "_workers"
RUNNING, STOPPED, UNRESPONSIVE = "running", "stopped", "unresponsive"
#: A running worker whose status is older than this many pump intervals is unresponsive.
STALE_PUMP_INTERVALS = 5
STALE_MIN_S = 15.0


def stale_after_s(settings: PipelineSettings) -> float:
    return max(STALE_PUMP_INTERVALS * settings.pump_interval_s, STALE_MIN_S)


def read_statuses(
    raw: dict[str, str], now: float, stale_s: float, expire_s: float = float("inf")
) -> list[dict[str, Any]]:
    """Published statuses by worker name, each with `age_s` and `state`, expired ones left
    out."""
    statuses = []
    for name in sorted(raw):
        status = json.loads(raw[name])
        age_s = max(0.0, now - float(status.get("updated_at", 0.0)))
        state = status.get("state", RUNNING)
        if state == RUNNING and age_s > stale_s:
            state = UNRESPONSIVE
            status["stale_running"] = status.pop("running", [])
            status["running"] = []
        if state != RUNNING and age_s > expire_s:
            continue
        statuses.append({**status, "age_s": round(age_s, 3), "state": state})
    return statuses


def expired(raw: dict[str, str], now: float, settings: PipelineSettings) -> list[str]:
    """Names of the statuses that have expired (see the module doc)."""
    kept = read_statuses(raw, now, stale_after_s(settings), settings.worker_status_expiry_s)
    return sorted(set(raw) - {s["name"] for s in kept})


async def worker_statuses(
    backend: PipelineBackend, now: float, settings: PipelineSettings
) -> list[dict[str, Any]]:
    """What every worker last published on `backend`, with its liveness (see module doc)."""
    raw = await backend.state_get(WORKERS_SCOPE)
    return read_statuses(raw, now, stale_after_s(settings), settings.worker_status_expiry_s)
