"""Records as the API shows them (the response models in `schemas.py` document these)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any

from stratamem.api.errors import tenant_text
from stratamem.domain import MemoryRecord, Profile, Scene, Turn
from stratamem.failures import BulkRetry, RetryOutcome
from stratamem.pipeline.task import DeadLetter, Task
from stratamem.store.failures.records import Failure


def package_version() -> str:
    """The installed stratamem's version (what /v1/health and the MCP server report)."""
    try:
        return version("stratamem")
    except PackageNotFoundError:
        return "unknown"


def turn_json(turn: Turn) -> dict[str, Any]:
    """A turn without its tenant (the caller's own)."""
    return {
        "id": turn.id,
        "session": turn.session,
        "seq": turn.seq,
        "role": turn.role.value,
        "speaker": turn.speaker,
        "text": turn.text,
        "timestamp": turn.timestamp,
        "metadata": turn.metadata,
    }


def memory_json(memory: MemoryRecord) -> dict[str, Any]:
    return {
        "id": memory.id,
        "type": memory.type.value,
        "content": memory.content,
        "priority": memory.priority,
        "source_turn_ids": list(memory.source_turn_ids),
        "session": memory.session,
        "activity_start": memory.activity_start,
        "activity_end": memory.activity_end,
        "valid_from": memory.valid_from,
        "valid_to": memory.valid_to,
        "superseded_by": memory.superseded_by,
        "created_at": memory.created_at,
        "updated_at": memory.updated_at,
        "mode": memory.mode.value,
        "metadata": memory.metadata,
    }


def scene_json(scene: Scene) -> dict[str, Any]:
    return {
        "id": scene.id,
        "title": scene.title,
        "summary": scene.summary,
        "body": scene.body,
        "heat": round(scene.heat, 6),
        "version": scene.version,
        "memory_ids": list(scene.memory_ids),
        "created_at": scene.created_at,
        "updated_at": scene.updated_at,
        "deleted": scene.deleted,
        "mode": scene.mode.value,
    }


def profile_json(profile: Profile) -> dict[str, Any]:
    return {
        "body": profile.body,
        "version": profile.version,
        "updated_at": profile.updated_at,
        "mode": profile.mode.value,
    }


def task_json(task: Task) -> dict[str, Any]:
    """A task without its tenant (the caller's own)."""
    return {
        "id": task.id,
        "type": task.type.name,
        "session": task.session,
        "payload": task.payload,
        "attempt": task.attempt,
    }


def dead_letter_json(dead: DeadLetter) -> dict[str, Any]:
    return {
        "id": dead.id,
        "task": task_json(dead.task),
        "error": tenant_text(dead.error),
        "failed_at": dead.failed_at,
    }


def failure_json(failure: Failure) -> dict[str, Any]:
    """A failure record as its tenant sees it (the operator's CLI shows the stored text)."""
    return {**failure.to_json(), "error": tenant_text(failure.error)}


def retry_json(outcome: RetryOutcome) -> dict[str, Any]:
    return {"failure": failure_json(outcome.failure), "result": outcome.result}


def bulk_retry_json(outcome: BulkRetry) -> dict[str, Any]:
    answer = outcome.to_json()
    answer["failed"] = {k: tenant_text(v) for k, v in outcome.failed.items()}
    return answer
