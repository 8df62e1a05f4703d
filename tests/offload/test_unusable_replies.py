"""Offload stages against replies they cannot use: summaries cut off or naming invented call
ids, endpoint failures; and compaction, which never drops a tool result without a ref."""

from __future__ import annotations

from typing import Any

import pytest

from stratamem.clock import ManualClock
from stratamem.domain import Mode, Scope
from stratamem.llm import LLMClient, LLMHTTPError
from stratamem.offload.compaction import compact
from stratamem.offload.l1_summaries import run_l1
from stratamem.offload.tokens import context_tokens
from stratamem.store.failures.records import Failure, FailureKind, FailureQuery, FailureStatus
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.testing import RecordedRequest, Reply, ScriptedLLM

from . import model
from .conftest import Rig, make_rig
from .test_flow import chat, pairs

T, S = "acme", "sess-1"


def records(rig: Rig, kind: FailureKind | None = None) -> list[Failure]:
    return SqlLayerStore(rig.store._store).list_failures(Scope(T), FailureQuery(kind=kind))


async def test_invented_call_ids_get_a_repair_round(rig: Rig, scripted_llm: ScriptedLLM) -> None:
    dots = Reply.json({"entries": [{"call_id": "...", "summary": "...", "score": 7},
                                   {"call_id": "...", "summary": "...", "score": 8}]})  # fmt: skip
    scripted_llm.push_for("offload-l1", dots)
    scripted_llm.on("offload-l1", model.summaries)
    await rig.offload.ingest(T, S, pairs(rig.clock.now(), 2))
    outcome = await run_l1(rig.offload.deps, T, S)

    assert outcome.fallbacks == () and len(outcome.created) == 2
    _, repair = scripted_llm.calls("offload-l1")
    assert "no entry summarises a call shown" in repair.messages[-1]["content"]
    assert "'...' was not shown" in repair.messages[-1]["content"]
    assert {e.mode for e in await rig.offload.entries(T, S)} == {Mode.LLM}


async def test_a_batch_that_stays_unusable_is_split_down_to_offline_entries(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    """A result the model cannot summarise (its reply is always cut off) gets the offline
    summary and a noted fallback; the other calls get the model's summaries."""

    def cut_when_call_1_is_shown(request: RecordedRequest) -> Reply:
        if "[call_1] tool" in str(request.messages[1]["content"]):
            return Reply.truncated('{"entries": [{"call_id": "call_1", "summary": "The code is')
        return model.summaries(request)

    scripted_llm.on("offload-l1", cut_when_call_1_is_shown)
    batch = pairs(rig.clock.now(), 4)
    await rig.offload.ingest(T, S, batch)
    outcome = await run_l1(rig.offload.deps, T, S)

    assert outcome.fallbacks == ("call_1",) and outcome.released == ()
    entries = {e.call_id: e for e in await rig.offload.entries(T, S)}
    assert entries["call_1"].mode is Mode.OFFLINE and entries["call_1"].score <= 1
    assert {entries[c].mode for c in ("call_0", "call_2", "call_3")} == {Mode.LLM}
    back = await rig.offload.read_back(T, entries["call_1"].ref_id, max_tokens=100_000)
    assert back.text == batch[1].output
    [fallback] = records(rig, FailureKind.FALLBACK)
    assert fallback.status is FailureStatus.NOTED and "LLMReplyTruncated" in fallback.error
    assert fallback.detail == {"call_ids": ["call_1"]}
    assert sorted(len(b.detail["call_ids"]) for b in records(rig, FailureKind.BATCH)) == [2, 4]


async def test_calls_past_the_attempts_are_given_back(
    offload_store: SqlOffloadStore, clock: ManualClock, llm: LLMClient,
    scripted_llm: ScriptedLLM,
) -> None:  # fmt: skip
    rig = make_rig(offload_store, clock, llm, l1_max_attempts=1)
    scripted_llm.on("offload-l1", lambda request: Reply.text("The code is:"))
    await rig.offload.ingest(T, S, pairs(clock.now(), 4))
    outcome = await run_l1(rig.offload.deps, T, S)
    assert outcome.fallbacks == ("call_0",)  # three attempts: 4 → 2 → 1, the first call settled
    assert outcome.released == ("call_1", "call_2", "call_3")
    assert rig.store.pending_pairs(Scope(T), S) == 3
    assert [t.stage.value for t in rig.runner.ready()] == ["offload-l1"]  # the rest goes on


async def test_an_endpoint_failure_is_recorded_and_resolved_by_the_next_run(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    scripted_llm.push_for("offload-l1", Reply.error(503, "model overloaded"))
    scripted_llm.on("offload-l1", model.summaries)
    await rig.offload.ingest(T, S, pairs(rig.clock.now(), 2))
    with pytest.raises(LLMHTTPError):
        await run_l1(rig.offload.deps, T, S)
    [failure] = records(rig)
    assert (failure.kind, failure.status, failure.stage) == (
        FailureKind.STAGE, FailureStatus.OPEN, "offload-l1",
    )  # fmt: skip
    assert "model overloaded" in failure.raws[0]
    assert (await run_l1(rig.offload.deps, T, S)).claimed == 2
    assert records(rig)[0].status is FailureStatus.RESOLVED


def tool_chat(count: int, first_ask: str = "Fix the failing refund test") -> list[dict[str, Any]]:
    messages = chat(pairs(0.0, count), "Is it fixed now?")
    messages[1]["content"] = first_ask
    return messages


async def test_compaction_makes_a_ref_for_a_result_without_an_entry(rig: Rig) -> None:
    """The summaries failed (or have not run): the results still leave with a ref."""
    messages = tool_chat(6)
    budget = int(context_tokens(messages) / 0.9)
    pure = compact(messages, budget, {}, [], rig.offload.deps.settings)
    tools = [m for m in messages if m["role"] == "tool"]
    assert all(m in pure.messages for m in tools)  # kept: they have no ref to give
    assert pure.unreferenced and set(pure.unreferenced) <= {m["tool_call_id"] for m in tools}

    result = await rig.offload.compact(T, S, messages, budget)
    assert result.dropped_messages > 0 and result.unreferenced == ()
    entries = {e.call_id: e for e in await rig.offload.entries(T, S)}
    dropped = [m for m in messages if m not in result.messages and m["role"] == "tool"]
    assert dropped
    note = result.messages[1]["content"]
    for message in dropped:
        entry = entries[message["tool_call_id"]]
        assert entry.mode is Mode.OFFLINE and entry.tool in ("read_file", "run_tests")
        assert entry.ref_id in note
        back = await rig.offload.read_back(T, entry.ref_id, max_tokens=100_000)
        assert back.text == message["content"]
    assert "«Fix the failing refund test»" in note  # the request the work followed


async def test_compaction_keeps_a_result_whose_call_id_cannot_have_a_ref(rig: Rig) -> None:
    messages = tool_chat(4)
    odd = next(m for m in messages if m["role"] == "tool")
    odd["tool_call_id"] = "call/../0"  # not an identifier: no entry, no ref can exist
    budget = int(context_tokens(messages) / 0.9)
    result = await rig.offload.compact(T, S, messages, budget)
    assert odd in result.messages and result.unreferenced == ("call/../0",)


async def test_a_pending_pair_compacted_before_its_summary_is_done_once(
    rig: Rig, scripted_llm: ScriptedLLM
) -> None:
    batch = pairs(rig.clock.now(), 6)
    await rig.offload.ingest(T, S, batch)  # below the batch: offload-l1 waits for its timer
    messages = chat(batch, "Is it fixed now?")
    result = await rig.offload.compact(T, S, messages, int(context_tokens(messages) / 0.9))
    made = {e.call_id for e in await rig.offload.entries(T, S)}
    assert made and result.unreferenced == ()
    assert rig.store.pending_pairs(Scope(T), S) == len(batch) - len(made)
    scripted_llm.on("offload-l1", model.summaries)
    outcome = await run_l1(rig.offload.deps, T, S)
    assert outcome.claimed == len(batch) - len(made)  # made ones are done: summarised once
    shown = "".join(str(r.messages[1]["content"]) for r in scripted_llm.calls("offload-l1"))
    assert not [c for c in made if f"[{c}]" in shown]
    assert sorted(e.call_id for e in await rig.offload.entries(T, S)) == sorted(
        p.call_id for p in batch
    )
