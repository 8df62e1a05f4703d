"""What the web inspector needs beside the other routes, tenant-scoped like them: the caller's
sessions and where L1 stands in each (with what it owes and why), a memory's source turns, and
recall with each retriever's rank and score behind every hit."""

from __future__ import annotations

import asyncio
from typing import Annotated, Any

from fastapi import APIRouter, Query

from stratamem.api.deps import MemoryDep, ServicesDep, TenantDep
from stratamem.api.schemas import ERRORS, RecallIn
from stratamem.api.services import Services
from stratamem.api.views import dead_letter_json, failure_json, task_json, turn_json
from stratamem.domain import Hit, Scope, check_ident
from stratamem.llm.client import LLMClient
from stratamem.retrieval.config import RETRIEVERS
from stratamem.store.failures.records import FailureQuery, FailureStatus
from stratamem.store.layers.port import SessionState
from stratamem.timestamps import utc_text

#: How many queued tasks and dead letters a session's status reads at most.
SCAN_LIMIT = 10_000
DEAD_SCAN = 1000
OPEN_FAILURES = 50
MAX_SESSIONS_PAGE = 500

router = APIRouter(prefix="/v1", tags=["inspector"], responses=ERRORS)


def state_json(state: SessionState) -> dict[str, Any]:
    return {
        "session": state.session,
        "last_seq": state.last_seq,
        "cursor_seq": state.cursor_seq,
        "pending_turns": state.pending_turns,
        "l1_runs": state.l1_runs,
        "last_turn_at": state.last_turn_at,
        "last_l1_at": state.last_l1_at,
        "last_l2_at": state.last_l2_at,
    }


@router.get("/sessions")
async def list_sessions(
    tenant: TenantDep,
    services: ServicesDep,
    limit: Annotated[int, Query(ge=1, le=MAX_SESSIONS_PAGE)] = 100,
    offset: Annotated[int, Query(ge=0, le=1_000_000)] = 0,
) -> dict[str, Any]:
    """The caller's sessions (those with captured turns), oldest first, with where L1 stands
    in each: its cursor, the turns past it, how often it ran. `total`: how many there are."""
    scope = Scope(tenant)
    names = await asyncio.to_thread(services.memory.store.list_sessions, scope)
    page = names[offset : offset + limit]
    layers = services.layers
    states = await asyncio.to_thread(lambda: [layers.session_state(scope, s) for s in page])
    return {"total": len(names), "sessions": [state_json(s) for s in states]}


@router.get("/sessions/{session}/status")
async def session_status(session: str, tenant: TenantDep, services: ServicesDep) -> dict[str, Any]:
    """Where L1 stands in one session and what it owes: the turns past its cursor, the
    session's queued and dead tasks, its open failure records, whether the LLM endpoint is
    refusing calls (an outage postpones work), and `reasons`: all of it in plain words."""
    check_ident(session, "session")
    scope = Scope(tenant)
    state = await asyncio.to_thread(services.layers.session_state, scope, session)
    query = FailureQuery(session=session, status=FailureStatus.OPEN, limit=OPEN_FAILURES)
    failures = await services.failures.list(tenant, query)
    status = {
        **state_json(state),
        "queued": await _queued(services, tenant, session),
        "dead_letters": await _dead(services, tenant, session),
        "open_failures": [failure_json(f) for f in failures],
        "llm": _llm_state(services),
    }
    return {**status, "reasons": l1_reasons(status)}


async def _queued(services: Services, tenant: str, session: str) -> list[dict[str, Any]]:
    if services.pipeline is None:
        return []
    tasks = await services.pipeline.list_tasks(limit=SCAN_LIMIT)
    return [task_json(t) for t in tasks if t.tenant == tenant and t.session == session]


async def _dead(services: Services, tenant: str, session: str) -> list[dict[str, Any]]:
    if services.pipeline is None:
        return []
    dead = await services.pipeline.list_dead(limit=DEAD_SCAN, tenant=tenant)
    return [dead_letter_json(d) for d in dead if d.task.session == session]


def _llm_state(services: Services) -> dict[str, Any]:
    """Offline (no endpoint: the offline extractor runs), or the L1 endpoint's breaker."""
    llm = services.memory.llm
    if llm is None:
        return {"mode": "offline", "endpoint": None}
    if not isinstance(llm, LLMClient):
        return {"mode": "llm", "endpoint": None}
    base_url = llm.settings.for_stage("L1").base_url
    return {"mode": "llm", "endpoint": llm.breaker.state(base_url).value}


def l1_reasons(status: dict[str, Any]) -> list[str]:
    """Why the session's L1 is or is not done, from its status, in plain words."""
    pending, reasons = status["pending_turns"], []
    if status["last_seq"] == 0:
        return ["no turn of this session was captured"]
    if pending == 0:
        reasons.append(f"L1 has read every captured turn (cursor at {status['cursor_seq']})")
    else:
        reasons.append(f"{pending} turn(s) past the cursor ({status['cursor_seq']}) wait for L1")
    if status["llm"]["endpoint"] in ("open", "half_open"):
        reasons.append("the LLM endpoint is failing: its breaker holds L1 back until it answers")
    if pending and not status["queued"] and not status["dead_letters"]:
        reasons.append("no L1 task is queued yet: the backlog scheduler submits one on its"
                       " next pass (or at the session's next turn threshold or idle timeout)")
    for task in status["queued"]:
        reasons.append(f"{task['type']} task queued or running (attempt {task['attempt']})")
    for dead in status["dead_letters"]:
        reasons.append(f"{dead['task']['type']} task failed every retry, a dead letter:"
                       f" {dead['error']} (requeue it on the pipeline view)")
    for failure in status["open_failures"]:
        reasons.append(f"open {failure['kind']} failure of {failure['stage']} on"
                       f" {len(failure['turn_ids'])} turn(s): {failure['error']}"
                       f" ({_retry_plan(failure)})")  # fmt: skip
    return reasons


def _retry_plan(failure: dict[str, Any]) -> str:
    """Whether an open record heals by itself, and when, or waits for its operator."""
    if failure.get("retry_at") is not None:
        when = utc_text(failure["retry_at"], "%Y-%m-%d %H:%M:%S UTC", "-")
        return f"retried by itself at {when}, or retry it now"
    if failure["kind"] == "stage":
        return "the stage's next success resolves it, or retry it now"
    return "retry it"


@router.get("/memories/{memory_id}/sources")
async def memory_sources(memory_id: str, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """The turns a memory was drawn from (its provenance), verbatim; `missing`: the ids of
    source turns no longer stored (their session was forgotten)."""
    record = await memory.get_memory(tenant, memory_id)
    ids = list(record.source_turn_ids)
    turns = await asyncio.to_thread(memory.store.get_turns, Scope(tenant), ids)
    found = {t.id for t in turns}
    return {
        "memory": record.id,
        "turns": [turn_json(t) for t in turns],
        "missing": [i for i in ids if i not in found],
    }


@router.post("/recall/explain")
async def recall_explain(body: RecallIn, tenant: TenantDep, memory: MemoryDep) -> dict[str, Any]:
    """Recall as `POST /v1/recall` answers it (the same blocks, sizes and hits), each hit with
    the rank and score every retriever gave it, and the fusion's settings: why each hit was
    recalled, and in that order."""
    result = await memory.recall(
        tenant, body.query, session=body.session, k=body.k, budget_chars=body.budget_chars,
        include_turns=body.include_turns,
    )  # fmt: skip
    config = memory.retrieval
    fusion = {"rrf_k": config.rrf_k, "weights": {name: config.weight(name) for name in RETRIEVERS}}
    return {**result.to_json(), "hits": [explained(h) for h in result.hits], "fusion": fusion}


def explained(hit: Hit) -> dict[str, Any]:
    """A hit with `retrievers`: `{"L1:bm25": {"rank": 1, "score": 7.2}, …}`."""
    retrievers = {
        name: {"rank": rank, "score": round(hit.retriever_scores.get(name, 0.0), 6)}
        for name, rank in sorted(hit.ranks.items())
    }
    return {**hit.to_json(), "retrievers": retrievers}
