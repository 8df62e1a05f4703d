"""Failures of the LLM stages through the scripted server. An unusable L1 reply quarantines its
turns (raw replies kept) and the cursor moves on; a transport failure ends in a typed error,
every L0 turn intact and the cursor where it was, and a re-run then succeeds. Crashes between
the LLM reply and the commit re-run without duplicates. (The invariant over every failure, in
random sessions: test_quarantine.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from stratamem.clock import ManualClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import LayerConflict, StageOutputRejected, StaleFencingToken
from stratamem.failures import Failures
from stratamem.layers.service import Run
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLMClient, LLMHTTPError, LLMTimeout
from stratamem.store.core.port import Fence
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus
from stratamem.store.layers.port import L1Commit
from stratamem.store.sqlite import SqliteStore
from stratamem.testing import RecordedRequest, RecordingSleep, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers, l1_reply

from .conftest import llm_settings

TURNS = [
    {"role": "user", "speaker": "Maria", "text": "I'm a nurse and I live in Lisbon."},
    {"role": "user", "speaker": "Maria", "text": "I ran a half marathon yesterday."},
]
BAD_ID = Reply.json(
    {"memories": [{"type": "persona", "content": "x", "source_turn_ids": ["T7"]}]}
)
FENCE_KEY = "session/acme/s1"
SCOPE = Scope("acme")


@pytest.fixture
async def memory(
    tmp_path: Path, clock: ManualClock, scripted_llm: ScriptedLLM, layer_settings: LayerSettings
) -> AsyncIterator[AsyncMemory]:
    client = LLMClient(llm_settings(scripted_llm), sleep=RecordingSleep())
    settings = Settings(data_dir=tmp_path / "data", embedder="none")
    core = AsyncMemory.open(settings, clock=clock, llm=client, layer_settings=layer_settings)
    await core.capture("acme", "s1", TURNS)
    install_layer_handlers(scripted_llm)
    yield core
    await core.aclose()
    await client.aclose()


def assert_untouched(memory: AsyncMemory) -> None:
    scope = SCOPE
    assert [t.text for t in memory.store.list_turns(scope, "s1")] == [t["text"] for t in TURNS]
    assert memory.layers is not None
    assert memory.layers.session_state(scope, "s1").cursor_seq == 0
    assert memory.store.list_memories(scope) == []


@pytest.mark.parametrize(
    ("replies", "raws"),
    [
        ((Reply.text("{not json"), Reply.text("still [not json")),
         ("{not json", "still [not json")),
        ((BAD_ID, BAD_ID), None),
        ((Reply.empty(), Reply.empty(null=True)), ("", "")),
    ],
    ids=["malformed-json", "ids-not-shown", "empty"],
)  # fmt: skip
async def test_an_unusable_reply_quarantines_its_turns_and_moves_on(
    memory: AsyncMemory,
    scripted_llm: ScriptedLLM,
    replies: tuple[Reply, ...],
    raws: tuple[str, ...] | None,
) -> None:
    scripted_llm.push_for("L1", *replies * 3)  # the batch, then each turn alone
    service = memory.layer_service()
    result = await service.run_l1(Run("acme", "task-1", "s1"))

    assert result.counts["quarantined"] == 2 and result.counts["rejected_batches"] == 1
    assert memory.layers is not None
    assert memory.layers.session_state(SCOPE, "s1").cursor_seq == 2
    assert [t.text for t in memory.store.list_turns(SCOPE, "s1")] == [t["text"] for t in TURNS]
    quarantined = memory.layers.list_failures(SCOPE, FailureQuery(kind=FailureKind.QUARANTINE))
    turns = memory.store.list_turns(SCOPE, "s1")
    assert sorted(f.turn_ids for f in quarantined) == sorted((t.id,) for t in turns)
    for failure in quarantined:
        assert failure.task_id == "task-1" and failure.stage == "L1" and failure.raws
        assert failure.status is FailureStatus.OPEN
        if raws is not None:
            assert failure.raws == raws
    # the endpoint recovers: a retry of each quarantined turn covers it
    for failure in quarantined:
        await Failures(service).retry("acme", failure.id)
    assert len(memory.store.list_memories(SCOPE)) == 2


@pytest.mark.parametrize(
    "replies",
    [(Reply.error(500, "boom"), Reply.error(503, "down")),
     (Reply.held(Reply.json({"memories": []})),)],
    ids=["server-errors", "timeout"],
)  # fmt: skip
async def test_a_transport_failure_keeps_turns_and_cursor(
    memory: AsyncMemory, scripted_llm: ScriptedLLM, replies: tuple[Reply, ...]
) -> None:
    scripted_llm.push_for("L1", *replies)
    service, hurried = memory.layer_service(), memory.layer_service()
    # Only the failing run waits 0.3 s (a held reply never comes): a reply the scripted server
    # owes must never race a wall-clock bound that a loaded machine can exceed.
    short = LLMClient(llm_settings(scripted_llm, timeout_s=0.3), sleep=RecordingSleep())
    hurried.llm = short
    try:
        with pytest.raises((LLMHTTPError, LLMTimeout)):
            await hurried.run_l1(Run("acme", "task-1", "s1"))
    finally:
        await short.aclose()
    assert_untouched(memory)
    assert memory.layers is not None
    [failure] = memory.layers.list_failures(SCOPE)
    assert failure.task_id == "task-1" and failure.kind is FailureKind.STAGE
    scripted_llm.release()
    # the server recovers: the same task runs again, moves the cursor, resolves the record
    again = await service.run_l1(Run("acme", "task-1", "s1"))
    assert again.changed and len(memory.store.list_memories(SCOPE)) == 2
    assert memory.layers.get_failure(SCOPE, failure.id).status is FailureStatus.RESOLVED


async def test_an_empty_reply_is_recorded_as_such(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    await memory.capture("acme", "s2", TURNS[:1])
    scripted_llm.push_for("L1", Reply.empty(), Reply.empty())
    await memory.layer_service().run_l1(Run("acme", "task-1", "s2"))
    assert memory.layers is not None
    [failure] = memory.layers.list_failures(SCOPE, FailureQuery(session="s2"))
    assert failure.error.startswith("LLMEmptyReply:") and failure.raws == ("", "")


async def test_an_l2_reply_excerpt_is_in_the_error_message(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    service = memory.layer_service()
    await service.run_l1(Run("acme", "task-1", "s1"))
    scripted_llm.push_for("L2", Reply.text("I cannot do that"), Reply.text("I cannot do that"))
    with pytest.raises(StageOutputRejected, match="raw reply begins 'I cannot do that'"):
        await service.run_l2(Run("acme", "task-2", "s1"))


async def test_stale_fence_between_reply_and_commit_writes_nothing(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """Another worker takes the lock while the model answers: our commit is refused."""

    def take_over(request: RecordedRequest) -> Reply:
        assert isinstance(memory.store, SqliteStore)
        with memory.store.writing(Fence(FENCE_KEY, 2)):
            pass
        return l1_reply(request)

    scripted_llm.on("L1", take_over)
    service = memory.layer_service()
    with pytest.raises(StaleFencingToken):
        await service.run_l1(Run("acme", "task-1", "s1", Fence(FENCE_KEY, 1)))
    assert_untouched(memory)

    scripted_llm.on("L1", l1_reply)
    result = await service.run_l1(Run("acme", "task-1", "s1", Fence(FENCE_KEY, 3)))
    assert result.changed and len(memory.store.list_memories(SCOPE)) == 2


async def test_a_rerun_after_commit_replays_the_receipt(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """The worker died after the commit, before acknowledging: the task is delivered again."""
    service = memory.layer_service()
    first = await service.run_l1(Run("acme", "task-1", "s1", Fence(FENCE_KEY, 1)))
    calls = len(scripted_llm.requests)
    again = await service.run_l1(Run("acme", "task-1", "s1", Fence(FENCE_KEY, 2)))

    assert again.replayed and again.changed == first.changed and again.counts == first.counts
    assert len(scripted_llm.requests) == calls  # no model call paid twice
    assert len(memory.store.list_memories(SCOPE)) == 2


async def test_a_cursor_moved_meanwhile_is_a_conflict(
    memory: AsyncMemory, scripted_llm: ScriptedLLM, clock: ManualClock
) -> None:
    """Another run committed the same turns while this one waited for the model."""
    assert memory.layers is not None
    layers = memory.layers

    def overtaken(request: RecordedRequest) -> Reply:
        commit = L1Commit("s1", "other-task", 0, 2, clock.now())
        layers.commit_l1(SCOPE, commit)
        return l1_reply(request)

    scripted_llm.on("L1", overtaken)
    with pytest.raises(LayerConflict):
        await memory.layer_service().run_l1(Run("acme", "task-1", "s1"))
    assert memory.store.list_memories(SCOPE) == []
    assert memory.evidence is not None
    assert memory.evidence.receipt(SCOPE, "task-1") is None
