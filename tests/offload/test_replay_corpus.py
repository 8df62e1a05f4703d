"""The offload stages against what a real small model answered (corpus runs offload1/offload2).

The session is read back from the recorded prompts (the tool calls of the summary prompt, the
user messages of the judgment prompts), ingested, and its stages run while the scripted
endpoint answers each stage with the run's recorded replies, byte for byte, from the start
again when they run out (a stage the run never reached gets the cooperative stand-in). Then the
context is compacted for 2,000 tokens, as in the recorded run. Whatever the model said: no
summary cut off or naming invented call ids is kept, every call has an entry and a ref, every
message is judged, nothing leaves the context without a ref, and every failure is listed.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest

from stratamem.domain import Mode, Scope
from stratamem.offload import ToolPair
from stratamem.store.failures.records import FailureKind, FailureQuery
from stratamem.store.layers.store import SqlLayerStore
from stratamem.testing import ScriptedLLM
from tests.replay_corpus import Exchange, exchanges

from . import model
from .conftest import Rig

pytestmark = pytest.mark.llm_replies

T, S = "acme", "shop-refund"
_CALL = re.compile(
    r"^\[(?P<id>c\d+)\] tool: (?P<tool>\S+)\nparams: (?P<params>.*)\n"
    r"result(?: \(first \d+ of \d+ characters\))?:\n",
    re.MULTILINE,
)


def tool_calls(recorded: list[Exchange], t0: float) -> list[ToolPair]:
    """The calls the first summary prompt showed (results as shown)."""
    prompt = next(str(e.request["messages"][-1]["content"]) for e in recorded
                  if e.stage == "offload-l1")  # fmt: skip
    found = list(_CALL.finditer(prompt))
    pairs = []
    for i, match in enumerate(found):
        end = found[i + 1].start() if i + 1 < len(found) else len(prompt)
        result = prompt[match.end() : end].rstrip("\n")
        pairs.append(ToolPair(match["id"], match["tool"], json.loads(match["params"]), result,
                              t0 + 1 + i))  # fmt: skip
    return pairs


def user_messages(recorded: list[Exchange]) -> list[str]:
    said: list[str] = []
    for exchange in recorded:
        prompt = str(exchange.request["messages"][-1]["content"])
        if exchange.stage == "offload-l15" and "NEW USER MESSAGE\n" in prompt:
            text = prompt.split("NEW USER MESSAGE\n", 1)[1].strip()
            said += [] if text in said else [text]
    return said


def chat(asked: list[str], pairs: list[ToolPair]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are a coding agent."},
                                      {"role": "user", "content": asked[0]}]  # fmt: skip
    for pair in pairs:
        call = {"id": pair.call_id, "type": "function",
                "function": {"name": pair.tool, "arguments": json.dumps(pair.params)}}  # fmt: skip
        messages += [{"role": "assistant", "content": None, "tool_calls": [call]},
                     {"role": "tool", "tool_call_id": pair.call_id, "content": pair.output}]
    return [*messages, {"role": "user", "content": asked[-1]}]


@pytest.mark.parametrize("run", ["offload1", "offload2"])
async def test_the_offload_stages_lose_nothing_whatever_the_model_said(
    rig: Rig, scripted_llm: ScriptedLLM, run: str
) -> None:
    recorded = exchanges(run)
    scripted_llm.on("offload-l2", model.diagram)
    for stage in {e.stage for e in recorded if e.stage}:
        cycle = itertools.cycle([e for e in recorded if e.stage == stage])
        scripted_llm.on(stage, lambda request, cycle=cycle: next(cycle).reply())
    t0 = rig.clock.now()
    asked = user_messages(recorded)
    pairs = tool_calls(recorded, t0)
    assert len(asked) == 2 and len(pairs) == 11
    await rig.offload.user_message(T, S, asked[0], timestamp=t0)
    await rig.offload.ingest(T, S, pairs)
    await rig.offload.user_message(T, S, asked[1], timestamp=t0 + 100)
    for _ in range(5):  # stage failures are retried, as the pipeline would
        await rig.runner.run(rig.offload, flush=True)

    scope = Scope(T)
    entries = {e.call_id: e for e in await rig.offload.entries(T, S)}
    assert set(entries) == {p.call_id for p in pairs}
    for entry in entries.values():
        assert entry.summary.strip(" .…") and entry.summary != "..."
        if entry.mode is Mode.LLM:  # only a summary of a call shown, never a cut-off one
            assert not entry.summary.startswith("The code is")
    assert rig.store.unjudged_marks(scope, S) == []
    failures = SqlLayerStore(rig.store._store).list_failures(scope, FailureQuery(limit=1000))
    assert failures and all(f.raws or f.kind is FailureKind.STAGE for f in failures)
    # offload1: every summary cut off or prose; offload2: only "..." call ids: offline entries
    assert {e.mode for e in entries.values()} == {Mode.OFFLINE}
    if run == "offload2":
        assert any("'...' was not shown" in f.error for f in failures)
    if run == "offload1":  # every judgment cut off or prose: the offline rule routes the work
        assert sum(f.kind is FailureKind.FALLBACK and f.stage == "offload-l15"
                   for f in failures) == 2  # fmt: skip

    messages = chat(asked, pairs)
    compacted = await rig.offload.compact(T, S, messages, budget_tokens=2000)
    assert compacted.unreferenced == () and compacted.dropped_messages > 0
    kept = {m.get("tool_call_id") for m in compacted.messages if m["role"] == "tool"}
    note = compacted.messages[1]["content"]
    for pair in pairs:
        if pair.call_id in kept:
            continue
        entry = entries[pair.call_id]
        back = await rig.offload.read_back(T, entry.ref_id, max_tokens=100_000)
        assert back.text == pair.output and entry.ref_id in note  # dropped, recoverable
    assert "earlier messages were offloaded" in note and asked[0][:40] in note
    chats = scripted_llm.calls(path="/v1/chat/completions")
    assert chats and all(r.body.get("max_tokens") for r in chats)  # no call unbounded
