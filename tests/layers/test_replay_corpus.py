"""The memory layers against what a real small model answered (the real-reply corpus).

The conversation each run was made from is read back from the recorded L1 prompts (LoCoMo
conv-30, read from its place, never copied), captured, and run through L1, L2 and L3 while the
scripted endpoint answers every request with the run's recorded replies of that stage, byte for
byte and in order, from the start again when they run out (stages a run never reached get the
cooperative stand-in). Whatever the model said: every turn ends covered by an accepted
extraction or quarantined with its raw replies, never silently consumed; L3 never runs without
scenes; every failure is listed.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import re
from collections.abc import Callable

import pytest

from stratamem.core import AsyncMemory
from stratamem.domain import Scope
from stratamem.errors import LLMError, StageOutputRejected
from stratamem.layers.service import Run
from stratamem.layers.settings import LayerSettings
from stratamem.store.failures.records import FailureKind, FailureQuery, FailureStatus
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM
from stratamem.testing.layers import install_layer_handlers
from tests.conversations import CONVERSATIONS, Conversation, ledger_of
from tests.replay_corpus import Exchange, exchanges

from .conftest import settle_l1

pytestmark = pytest.mark.llm_replies

SESSION = "conv-30"
RUNS = ("runC", "runD", "runE", "runE2", "runE3", "evalE")
_TURN = re.compile(
    r"^\[T\d+\] (?P<day>\d{4}-\d\d-\d\d) \(\w+\) (?P<time>\d\d:\d\d) UTC (?P<who>.+?)"
    r" \((?P<role>\w+)\): (?P<text>.*)$",
    re.MULTILINE,
)


def conversation(recorded: list[Exchange]) -> list[dict[str, str]]:
    """The turns the run's L1 prompts showed as NEW, in order, each once."""
    turns: dict[tuple[str, ...], dict[str, str]] = {}
    for exchange in recorded:
        prompt = str(exchange.request["messages"][-1]["content"])
        if exchange.stage != "L1" or "NEW turns" not in prompt:
            continue
        for found in _TURN.finditer(prompt.split("NEW turns", 1)[1]):
            key = (found["day"], found["time"], found["who"], found["text"])
            turns.setdefault(key, {
                "role": "user", "speaker": found["who"], "text": found["text"],
                "timestamp": f"{found['day']}T{found['time']}:00Z", "id": f"turn-{len(turns)}",
            })  # fmt: skip
    return list(turns.values())


def replaying(recorded: list[Exchange]) -> Callable[[RecordedRequest], Reply]:
    cycle = itertools.cycle(recorded)
    return lambda request: next(cycle).reply()


@pytest.fixture
def layer_settings() -> LayerSettings:
    return LayerSettings(max_batch_turns=8, max_memories_per_batch=5)  # as runE


@pytest.fixture
def memory(llm_memory: AsyncMemory) -> AsyncMemory:
    return llm_memory


@pytest.mark.parametrize("run", RUNS)
async def test_every_turn_is_covered_or_quarantined_whatever_the_model_said(
    memory: AsyncMemory, scripted_llm: ScriptedLLM, run: str
) -> None:
    recorded = exchanges(run)
    install_layer_handlers(scripted_llm)
    for stage in {e.stage for e in recorded if e.stage}:
        scripted_llm.on(stage, replaying([e for e in recorded if e.stage == stage]))
    turns = conversation(recorded)
    await memory.capture("acme", SESSION, turns)
    service = memory.layer_service()
    results = await settle_l1(service, SESSION)

    scope, layers = Scope("acme"), memory.layers
    assert layers is not None
    stored = memory.store.list_turns(scope, SESSION)
    assert layers.session_state(scope, SESSION).cursor_seq == stored[-1].seq == len(turns)
    quarantines = layers.list_failures(scope, FailureQuery(kind=FailureKind.QUARANTINE,
                                                           limit=1000))  # fmt: skip
    quarantined = {t for f in quarantines for t in f.turn_ids}
    covered = sum(r.counts["covered"] for r in results)
    assert covered + len(quarantined) == len(turns)  # each settled once, none skipped
    assert sum(r.counts["quarantined"] for r in results) == len(quarantines)
    cited = {t for m in memory.store.list_memories(scope, limit=1000) for t in m.source_turn_ids}
    assert not cited & quarantined  # a memory comes from an accepted extraction only
    answered = {e.content for e in recorded if e.content is not None}
    for record in quarantines:  # the raw replies are the model's own words, kept
        assert record.status is FailureStatus.OPEN and record.raws and record.error
        assert set(record.raws) <= answered | {r for r in record.raws if r.startswith("{")}
    if run in ("runC", "runD"):  # every reply cut off (or a transcript): nothing was read
        assert covered == 0 and cited == set()

    for task, stage in (("l2", service.run_l2), ("l3", service.run_l3)):
        with contextlib.suppress(StageOutputRejected, LLMError):  # recorded; retried later
            await stage(Run("acme", task, SESSION))
    for request in scripted_llm.calls("L3"):
        assert "SCENES:\n(none)" not in str(request.messages[-1]["content"])
    if not layers.current_scenes(scope):
        assert scripted_llm.calls("L3") == [] and layers.profile(scope) is None
    listed = layers.list_failures(scope, FailureQuery(limit=1000))
    assert {f.id for f in quarantines} <= {f.id for f in listed}
    chats = scripted_llm.calls(path="/v1/chat/completions")
    assert chats and all(r.body.get("max_tokens") for r in chats)  # no call unbounded


async def test_run_d_no_longer_consumes_77_turns_into_no_memories(
    memory: AsyncMemory, scripted_llm: ScriptedLLM
) -> None:
    """runD: four replies cut off mid-JSON were once read as "no memories" and the cursor moved
    past all 77 turns. Now each turn ends quarantined with the cut reply, retryable."""
    recorded = exchanges("runD")
    install_layer_handlers(scripted_llm)
    scripted_llm.on("L1", replaying(recorded))
    await memory.capture("acme", SESSION, conversation(recorded))
    await settle_l1(memory.layer_service(), SESSION)
    assert memory.layers is not None
    records = memory.layers.list_failures(Scope("acme"), FailureQuery(
        kind=FailureKind.QUARANTINE, status=FailureStatus.OPEN, limit=1000))  # fmt: skip
    assert len(records) == 77 and memory.store.list_memories(Scope("acme")) == []
    cut = {e.content for e in recorded}
    assert all(len(r.raws) == 1 and r.raws[0] in cut for r in records)  # no repair of a cut
    assert all(r.error.startswith("LLMReplyTruncated") for r in records)
    assert all(json.loads(e.response)["choices"][0]["finish_reason"] == "length"
               for e in recorded)  # fmt: skip


@pytest.mark.parametrize("run", ("runE", "evalE"))
@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=lambda c: c.name)
async def test_our_conversations_give_every_turn_an_outcome_and_only_supported_memories(
    memory: AsyncMemory, scripted_llm: ScriptedLLM, run: str, conversation: Conversation
) -> None:
    """Our own conversations (a name, a job, a diet, an allergy, a date, units, a change of
    plan) answered with a real small model's recorded replies, which fit other turns: every
    flush answers (L2 and L3 fall back offline where the replies are unusable), every turn has
    one outcome on the ledger, and no memory the support checks would refuse is stored."""
    recorded = [e for e in exchanges(run) if e.status == 200]  # outages are tested elsewhere
    install_layer_handlers(scripted_llm)
    for stage in {e.stage for e in recorded if e.stage}:
        scripted_llm.on(stage, replaying([e for e in recorded if e.stage == stage]))
    for session in conversation.sessions:
        await memory.capture("acme", session, conversation.messages(session))
        await memory.flush("acme", session)  # raises if a flush stopped
    counts = await ledger_of(memory, "acme", conversation)
    assert sum(counts.values()) == conversation.user_turns
    assert set(counts) <= {"extracted", "nothing_to_remember", "quarantined", "refused"}
