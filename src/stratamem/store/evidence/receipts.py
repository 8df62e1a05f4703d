"""Completion receipts: what a task finished with and which attempt ran it, authenticated.

Every task type that writes (L1, L2, L3, flush, offload-l1, offload-l15, offload-l2) writes a
receipt under its task id in the store: in the transaction of its effects for the types with one
commit (L1, L2, L3, offload-l1, offload-l15); flush and offload-l2, which commit several times
(each L1 batch of a flush under its own receipt `<task>.<i>`), write theirs last, alone, under
the same fence. A receipt carries the `Attempt` that ran the task (task id, attempt number,
delivery count, fencing token, worker, start time), its finish time, outcome and result summary.

Receipts are authenticated: an HMAC-SHA256 over these fields with a secret the store keeps
(`receipt_keys`, created on first use). Rotating adds a new signing key; receipts signed with an
older key still verify until that key is retired (rotate with `retire_old`). A receipt whose MAC
does not verify (tampered, written by hand, signed with a retired key, or from before receipts
were authenticated) has `authentic=False`: readers treat it as a conflict, never as completion.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass, field
from typing import Any

#: Outcomes a receipt records.
COMPLETED, SKIPPED = "completed", "skipped"


@dataclass(frozen=True, slots=True)
class Attempt:
    """One execution of a task by a worker, as the worker stamped it when it started.

    `attempt` is the task's retry count (0 first), `delivery` the hand-over count of the
    delivery it ran under (a reclaim counts one more), `token` the fencing token of its lock
    (None for lockless types)."""

    task_id: str
    attempt: int
    delivery: int
    token: int | None
    worker: str
    started_at: float

    def to_json(self) -> dict[str, Any]:
        # by hand, in field order: `asdict` deep-copies each field (a tenth of a no-op task's
        # CPU on Redis, which stamps every start with it)
        return {"task_id": self.task_id, "attempt": self.attempt, "delivery": self.delivery,
                "token": self.token, "worker": self.worker, "started_at": self.started_at}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        token = data.get("token")
        return cls(
            task_id=str(data["task_id"]),
            attempt=int(data["attempt"]),
            delivery=int(data["delivery"]),
            token=None if token is None else int(token),
            worker=str(data["worker"]),
            started_at=float(data["started_at"]),
        )


@dataclass(frozen=True, slots=True)
class Receipt:
    """A stored receipt. `authentic` is whether its MAC verified with a live key."""

    task_id: str
    kind: str
    completed_at: float
    result: dict[str, Any]
    outcome: str = COMPLETED
    attempt: Attempt | None = None
    authentic: bool = False


@dataclass(frozen=True, slots=True)
class ReceiptDraft:
    """A receipt to write. `task_id` may name a part of the task (`<task>@<cursor>`,
    `<task>.<i>`); `attempt` is the execution that writes it (None outside the pipeline)."""

    task_id: str
    kind: str
    finished_at: float
    result: dict[str, Any] = field(default_factory=dict)
    outcome: str = COMPLETED
    attempt: Attempt | None = None


def signed_fields(tenant: str, draft: ReceiptDraft) -> str:
    """The canonical text the MAC covers."""
    body = {
        "tenant": tenant,
        "task_id": draft.task_id,
        "kind": draft.kind,
        "finished_at": draft.finished_at,
        "outcome": draft.outcome,
        "result": draft.result,
        "attempt": None if draft.attempt is None else draft.attempt.to_json(),
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def mac(secret: bytes, tenant: str, draft: ReceiptDraft) -> str:
    return hmac.new(secret, signed_fields(tenant, draft).encode(), hashlib.sha256).hexdigest()


def verifies(secret: bytes | None, tenant: str, draft: ReceiptDraft, given: str | None) -> bool:
    """Whether `given` is the MAC of the receipt under `secret` (False without either)."""
    if secret is None or given is None:
        return False
    return hmac.compare_digest(mac(secret, tenant, draft), given)
