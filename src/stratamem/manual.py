"""Memories a caller states, corrects or retracts directly, beside those the layers distil.

A manual memory is an L1 record of mode `manual` with no source turns. Its id is derived from
the tenant, the type and the text, so stating the same thing twice stores it once. An update
writes a new version that supersedes the old one (the history keeps both); forgetting ends a
memory's validity without deleting it. Both are compare-and-set: if the memory layers (or another
caller) superseded or forgot the memory after it was read, `MemoryChanged` is raised and nothing
is written, so an edit never forks a memory's history.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from stratamem.capture import MAX_METADATA_CHARS, strip_injected
from stratamem.domain import MemoryRecord, MemoryType, Mode, Scope, check_ident
from stratamem.errors import InvalidInput, NotFound
from stratamem.inputs import check_json, nfc
from stratamem.store.core.port import Store

MIN_PRIORITY, MAX_PRIORITY = 0, 100


def manual_memory_id(
    tenant: str, memory_type: MemoryType, content: str, metadata_json: str = ""
) -> str:
    """Derived from what was stated (and its metadata, when it has some)."""
    base = f"{tenant}\x1f{memory_type.value}\x1f{content}"
    if metadata_json:
        base += f"\x1f{metadata_json}"
    return f"m_{hashlib.sha256(base.encode()).hexdigest()[:24]}"


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
    metadata: Mapping[str, Any] | None = None,
) -> tuple[MemoryRecord, bool]:
    """Store one memory; returns it and whether it was new (a current one is left as it is;
    a forgotten one stated again is stored anew, under a new id)."""
    text = _checked_text(content, max_chars)
    if session is not None:
        check_ident(session, "session")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise InvalidInput(f"priority must be {MIN_PRIORITY}-{MAX_PRIORITY}, not {priority}")
    extra = _checked_metadata(metadata)
    memory_id = manual_memory_id(scope.tenant, memory_type, text, extra)
    try:
        known = store.get_memory(scope, memory_id)
    except NotFound:
        known = None
    if known is not None:
        if known.is_current:
            return known, False
        memory_id = manual_memory_id(scope.tenant, memory_type, text, f"{extra}\x1f{now!r}")
    record = MemoryRecord(
        id=memory_id, tenant=scope.tenant, type=memory_type, content=text, priority=priority,
        session=session, valid_from=now, created_at=now, updated_at=now, mode=Mode.MANUAL,
        metadata=dict(metadata or {}),
    )  # fmt: skip
    store.upsert_memories(scope, [record])
    return record, True


def _checked_metadata(metadata: Mapping[str, Any] | None) -> str:
    """The metadata as canonical JSON ("" for none), within the size capture allows."""
    if not metadata:
        return ""
    check_json(metadata, "metadata")
    try:
        encoded = json.dumps(metadata, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"metadata is not JSON: {exc}") from exc
    if len(encoded) > MAX_METADATA_CHARS:
        raise InvalidInput(f"metadata is {len(encoded)} characters, more than {MAX_METADATA_CHARS}")
    return encoded


def _checked_text(content: str, max_chars: int) -> str:
    text = strip_injected(nfc(content, "a memory's text"))
    if not text:
        raise InvalidInput("a memory needs some text (recalled blocks are not memories)")
    if len(text) > max_chars:
        raise InvalidInput(f"a memory is at most {max_chars} characters, not {len(text)}")
    return text


def update_memory(
    store: Store,
    scope: Scope,
    memory_id: str,
    *,
    now: float,
    max_chars: int,
    content: str | None = None,
    memory_type: MemoryType | None = None,
    priority: int | None = None,
) -> MemoryRecord:
    """A new version of a current memory (mode `manual`) that supersedes it; the old version
    stays in its history. Retrying the same update returns the same version; an update that
    names nothing to change is refused (`{}` is a caller's mistake, not a no-op)."""
    if content is None and memory_type is None and priority is None:
        raise InvalidInput("the correction names nothing to change: give content, type or priority")
    old = _current(store, scope, memory_id)
    text = old.content if content is None else _checked_text(content, max_chars)
    new_type = memory_type or old.type
    new_priority = old.priority if priority is None else priority
    if not MIN_PRIORITY <= new_priority <= MAX_PRIORITY:
        raise InvalidInput(f"priority must be {MIN_PRIORITY}-{MAX_PRIORITY}, not {new_priority}")
    if (text, new_type, new_priority) == (old.content, old.type, old.priority):
        return old
    digest = hashlib.sha256(f"{old.id}\x1f{new_type.value}\x1f{new_priority}\x1f{text}".encode())
    new = replace(
        old, id=f"m_{digest.hexdigest()[:24]}", type=new_type, content=text,
        priority=new_priority, valid_from=now, valid_to=None, superseded_by=None,
        created_at=now, updated_at=now, mode=Mode.MANUAL,
    )  # fmt: skip
    closed = replace(old, valid_to=now, superseded_by=new.id, updated_at=now)
    store.upsert_memories(scope, [closed, new], expect_current=[old.id])
    return new


def forget_memory(store: Store, scope: Scope, memory_id: str, *, now: float) -> MemoryRecord:
    """End a memory's validity now (it leaves search and recall, its history stays). A memory
    already forgotten is returned as it is (a retry); a superseded version is refused with its
    successor's id, since forgetting it would leave the fact in recall."""
    memory = store.get_memory(scope, memory_id)
    if memory.superseded_by is not None:
        raise InvalidInput(
            f"memory {memory_id!r} was superseded by {memory.superseded_by!r}: forget that one"
        )
    if not memory.is_current:
        return memory
    forgotten = replace(memory, valid_to=now, updated_at=now)
    store.upsert_memories(scope, [forgotten], expect_current=[memory.id])
    return forgotten


def _current(store: Store, scope: Scope, memory_id: str) -> MemoryRecord:
    memory = store.get_memory(scope, memory_id)
    if memory.superseded_by is not None:
        raise InvalidInput(
            f"memory {memory_id!r} was superseded by {memory.superseded_by!r}: update that one"
        )
    if not memory.is_current:
        raise InvalidInput(f"memory {memory_id!r} was forgotten; add it again instead")
    return memory
