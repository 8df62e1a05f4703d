"""Memories a caller states directly ("remember that …"), beside those the layers distil.

A manual memory is an L1 record of mode `manual` with no source turns. Its id is derived from
the tenant, the type and the text, so stating the same thing twice stores it once.
"""

from __future__ import annotations

import hashlib

from stratamem.capture import strip_injected
from stratamem.domain import MemoryRecord, MemoryType, Mode, Scope, check_ident
from stratamem.errors import InvalidInput, NotFound
from stratamem.store.base import Store

MIN_PRIORITY, MAX_PRIORITY = 0, 100


def manual_memory_id(tenant: str, memory_type: MemoryType, content: str) -> str:
    digest = hashlib.sha256(f"{tenant}\x1f{memory_type.value}\x1f{content}".encode()).hexdigest()
    return f"m_{digest[:24]}"


def add_memory(
    store: Store,
    scope: Scope,
    content: str,
    *,
    memory_type: MemoryType,
    now: float,
    max_chars: int,
    session: str | None = None,
    priority: int = 50,
) -> tuple[MemoryRecord, bool]:
    """Store one memory; returns it and whether it was new (an existing one is left as it is)."""
    text = _checked_text(content, max_chars)
    if session is not None:
        check_ident(session, "session")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(f"priority must be {MIN_PRIORITY}-{MAX_PRIORITY}, not {priority}")
    memory_id = manual_memory_id(scope.tenant, memory_type, text)
    try:
        return store.get_memory(scope, memory_id), False
    except NotFound:
        pass
    record = MemoryRecord(
        id=memory_id, tenant=scope.tenant, type=memory_type, content=text, priority=priority,
        session=session, valid_from=now, created_at=now, updated_at=now, mode=Mode.MANUAL,
    )  # fmt: skip
    store.upsert_memories(scope, [record])
    return record, True


def _checked_text(content: str, max_chars: int) -> str:
    text = strip_injected(content)
    if not text:
        raise InvalidInput("a memory needs some text (recalled blocks are not memories)")
    if len(text) > max_chars:
        raise InvalidInput(f"a memory is at most {max_chars} characters, not {len(text)}")
    return text
