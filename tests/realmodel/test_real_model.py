"""The real-model tier: the LLM stages against SmolLM2-135M-Instruct on llama-cpp-python's
server (`make test-llm`). A model this small writes poor memories; what is checked here are the
invariants: no turn lost (each covered by an accepted extraction or quarantined), no session
stuck (the cursor reaches the last turn), no request without `max_tokens`, every failure
visible as a record, our two conversations flushed with every flush finishing, every user
turn with its outcome on the turn ledger and no stored memory failing the support checks, and
`eval locomo --mode llm` finishing with a report; all with the `llamacpp` profile's bounds.
The figures (calls, tokens, seconds per call, calls per captured turn, outcomes per stage, the
requests the server was sent) are printed as a table, with the ledgers and memories made.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from stratamem.clock import CountingIdFactory, SystemClock
from stratamem.config import Settings
from stratamem.core import AsyncMemory
from stratamem.datasets.locomo import load
from stratamem.domain import Scope
from stratamem.errors import LLMError, StageOutputRejected
from stratamem.layers.service import Run
from stratamem.layers.settings import LayerSettings
from stratamem.llm import LLMClient, LLMSettings
from stratamem.llm.settings import LOCAL_TIMEOUT_S
from stratamem.offload import InProcessRunner, Offload, ToolPair
from stratamem.store.failures.records import FailureKind, FailureQuery
from stratamem.store.layers.store import SqlLayerStore
from stratamem.store.offload.store import SqlOffloadStore
from stratamem.store.sqlite import SqliteStore
from tests.conversations import CONVERSATIONS, Conversation, ledger_of
from tests.layers.conftest import settle_l1

from .conftest import MODEL_ALIAS, Served, Wire
from .figures import print_figures

pytestmark = [pytest.mark.realmodel, pytest.mark.slow]

LOCOMO = Path("/work/shared/data/locomo/locomo_dev.json")
TENANT, SESSION = "tier", "conv-30-s1"
TURNS = int(os.environ.get("STRATAMEM_REALMODEL_TURNS", "8"))
TIMEOUT_S = LOCAL_TIMEOUT_S
MAX_TOKENS = os.environ.get("STRATAMEM_REALMODEL_MAX_TOKENS")
"""Unset: the `llamacpp` profile's own bounds (a small local model's, `LOCAL_MAX_TOKENS`), which
is what the tier checks; set, every stage's bound (a 135M model often loops until it)."""


def locomo_path() -> Path:
    path = Path(os.environ.get("STRATAMEM_LOCOMO", LOCOMO))
    if not path.is_file():
        pytest.skip(f"LoCoMo is not at {path} (set STRATAMEM_LOCOMO)")
    return path


def llm_settings(base_url: str) -> LLMSettings:
    bound = {"max_tokens": int(MAX_TOKENS)} if MAX_TOKENS else {}
    return LLMSettings(base_url=base_url, model=MODEL_ALIAS, structured="llamacpp",
                       max_attempts=2, **bound)  # fmt: skip


@pytest.fixture(scope="module")
def wire() -> Wire:
    return Wire()


@pytest.fixture
async def llm(counted_server: str, wire: Wire) -> AsyncIterator[LLMClient]:
    async with wire.client(TIMEOUT_S) as http:
        client = LLMClient(llm_settings(counted_server), client=http)
        yield client
        FIGURES.append(client.usage)


FIGURES: list[Any] = []
LEDGERS: dict[str, dict[str, int]] = {}
MEMORIES: dict[str, list[str]] = {}


@pytest.mark.parametrize("conversation", CONVERSATIONS, ids=lambda c: c.name)
async def test_our_conversations_flush_and_every_turn_has_a_visible_outcome(
    tmp_path: Path, llm: LLMClient, conversation: Conversation
) -> None:
    """Three sessions each, flushed as an agent ends them: every flush finishes (L2 and L3 fall
    back offline where the model cannot do them), every user turn has its outcome on the
    ledger, and no stored memory fails the support checks."""
    settings = Settings(data_dir=tmp_path, embedder="hash:64", background_embedding=False)
    layers = LayerSettings(max_batch_turns=8, max_memories_per_batch=5, context_turns=2)
    memory = AsyncMemory.open(settings, llm=llm, layer_settings=layers)
    try:
        for session in conversation.sessions:
            await memory.capture(TENANT, session, conversation.messages(session))
            result = await memory.flush(TENANT, session)  # a flush that stopped raises here
            assert result.l2 is not None
        counts = await ledger_of(memory, TENANT, conversation)
        assert sum(counts.values()) == conversation.user_turns
        assert set(counts) <= {"extracted", "nothing_to_remember", "quarantined", "refused"}
        stored = memory.store.list_memories(Scope(TENANT), limit=1000)
        assert memory.layers is not None
        refused = memory.layers.list_failures(Scope(TENANT), FailureQuery(
            kind=FailureKind.REFUSED, limit=1000))  # fmt: skip
        LEDGERS[conversation.name] = {**counts, "memories": len(stored),
                                      "refused_items": len(refused)}  # fmt: skip
        MEMORIES[conversation.name] = [f"({m.type.value}) {m.content}" for m in stored]
        print(f"\n{conversation.name}: ledger {LEDGERS[conversation.name]}")
        for line in MEMORIES[conversation.name]:
            print("  -", line)
        for record in refused:
            print("  refused:", record.raws[0][:160], "--", record.error[:160])
    finally:
        await memory.aclose()


async def test_memory_layers_lose_no_turn_and_leave_no_session_stuck(
    tmp_path: Path, llm: LLMClient, wire: Wire
) -> None:
    sample = next(s for s in load(locomo_path()) if s.sample_id == "conv-30")
    turns = [t for session in sample.sessions.values() for t in session][:TURNS]
    settings = Settings(data_dir=tmp_path, embedder="hash:64", background_embedding=False)
    layers = LayerSettings(max_batch_turns=8, max_memories_per_batch=5, context_turns=2)
    memory = AsyncMemory.open(settings, llm=llm, layer_settings=layers)
    try:
        await memory.capture(TENANT, SESSION, turns)
        service = memory.layer_service()
        results = await settle_l1(service, SESSION, tenant=TENANT, retries=5, runs=200)
        for task, stage in (("l2", service.run_l2), ("l3", service.run_l3)):
            with contextlib.suppress(StageOutputRejected, LLMError):  # recorded, retryable
                await stage(Run(TENANT, task, SESSION))
        scope, store = Scope(TENANT), memory.layers
        assert store is not None
        stored = memory.store.list_turns(scope, SESSION)
        assert store.session_state(scope, SESSION).cursor_seq == stored[-1].seq  # not stuck
        quarantined = {t for f in store.list_failures(scope, FailureQuery(
            kind=FailureKind.QUARANTINE, limit=1000)) for t in f.turn_ids}  # fmt: skip
        cited = {t for m in memory.store.list_memories(scope, limit=1000)
                 for t in m.source_turn_ids}  # fmt: skip
        covered = sum(r.counts["covered"] for r in results)
        assert covered + len(quarantined) == len(stored)  # each turn settled once, none skipped
        assert not cited & quarantined  # a memory comes from an accepted extraction only
        for record in store.list_failures(scope, FailureQuery(limit=1000)):
            assert record.error and (record.raws or record.kind is FailureKind.STAGE)
        if not store.current_scenes(scope):  # L3 never runs without scenes
            assert not [sent for sent in wire.sent if sent.stage == "L3"]
        _print_failures("layers", store.list_failures(scope, FailureQuery(limit=1000)))
    finally:
        await memory.aclose()
    assert wire.sent and all("max_tokens" in s.body for s in wire.sent)


async def test_offload_stages_keep_every_result_recoverable(
    tmp_path: Path, llm: LLMClient, wire: Wire
) -> None:
    store = SqliteStore(tmp_path / "stratamem.db")
    clock = SystemClock()
    runner = InProcessRunner(clock)
    offload = Offload(SqlOffloadStore(store), runner, llm=llm, clock=clock,
                      ids=CountingIdFactory("claim"))  # fmt: skip
    try:
        t0 = clock.now()
        pairs = tool_pairs(t0)
        await offload.user_message(TENANT, "task", "Fix the failing checkout test.", timestamp=t0)
        await offload.ingest(TENANT, "task", pairs)
        await offload.user_message(TENANT, "task", "Now also update the changelog.",
                                   timestamp=t0 + 60)  # fmt: skip
        for _ in range(3):
            await runner.run(offload, flush=True)
        entries = {e.call_id: e for e in await offload.entries(TENANT, "task")}
        assert set(entries) == {p.call_id for p in pairs}
        messages = chat(pairs)
        compacted = await offload.compact(TENANT, "task", messages, budget_tokens=600)
        assert compacted.unreferenced == ()
        for pair in pairs:
            back = await offload.read_back(TENANT, entries[pair.call_id].ref_id,
                                           max_tokens=100_000)  # fmt: skip
            assert back.text == pair.output
        failures = SqlLayerStore(store).list_failures(Scope(TENANT), FailureQuery(limit=1000))
        assert all(f.error for f in failures)
        _print_failures("offload", failures)
    finally:
        store.close()
    assert all("max_tokens" in s.body for s in wire.sent)


def tool_pairs(t0: float) -> list[ToolPair]:
    outputs = [
        ("read_file", {"path": "shop/checkout.py"},
         "def total(cart):\n    return sum(item.price for item in cart)\n" * 20),
        ("run_tests", {"path": "tests/test_checkout.py"},
         "FAILED tests/test_checkout.py::test_discount - assert 90 == 81\n1 failed, 12 passed"),
        ("grep", {"pattern": "discount", "path": "shop"},
         "shop/checkout.py:14: discount = cart.discount or 0\nshop/cart.py:3: discount: int"),
        ("edit_file", {"path": "shop/checkout.py", "line": 14},
         "applied: discount = cart.discount_percent / 100 * subtotal"),
        ("run_tests", {"path": "tests"}, "13 passed in 0.41s"),
    ]  # fmt: skip
    return [ToolPair(f"call_{i}", tool, params, output, t0 + 1 + i)
            for i, (tool, params, output) in enumerate(outputs)]  # fmt: skip


def chat(pairs: list[ToolPair]) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "Fix the failing checkout test."}]
    for pair in pairs:
        call = {"id": pair.call_id, "type": "function",
                "function": {"name": pair.tool, "arguments": json.dumps(pair.params)}}  # fmt: skip
        messages += [
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": pair.call_id, "content": pair.output},
        ]
    return [*messages, {"role": "user", "content": "Now also update the changelog."}]


def test_eval_locomo_in_llm_mode_finishes_with_a_report(
    tmp_path: Path, counted_server: str
) -> None:
    data = tmp_path / "slice.json"
    data.write_text(json.dumps([_slice(locomo_path())]), encoding="utf-8")
    env = {**os.environ, "STRATAMEM_LLM_BASE_URL": counted_server,
           "STRATAMEM_LLM_MODEL": MODEL_ALIAS, "STRATAMEM_LLM_STRUCTURED": "llamacpp",
           "STRATAMEM_LAYERS_MAX_BATCH_TURNS": "8"}  # fmt: skip
    env.pop("STRATAMEM_LLM_TIMEOUT_S", None)
    env.pop("STRATAMEM_LLM_MAX_TOKENS", None)
    if MAX_TOKENS:
        env["STRATAMEM_LLM_MAX_TOKENS"] = MAX_TOKENS
    command = [sys.executable, "-m", "stratamem", "--embedder", "hash:64", "eval", "locomo",
               "--data", str(data), "--mode", "llm", "--json", "--k", "1,5"]  # fmt: skip
    done = subprocess.run(
        command, check=False, env=env, capture_output=True, text=True, timeout=3600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    text = json.dumps(report)
    assert "llm_usage" in text and "failures" in text
    print("\neval locomo --mode llm on", TURNS, "turns:", json.dumps(report)[:1500])


def _slice(path: Path) -> dict[str, Any]:
    """conv-30's first session cut to TURNS turns, with the questions it alone answers."""
    raw = next(s for s in json.loads(path.read_text(encoding="utf-8"))
               if s["sample_id"] == "conv-30")  # fmt: skip
    conversation = {key: value for key, value in raw["conversation"].items()
                    if not key.startswith("session_")}  # fmt: skip
    conversation["session_1"] = raw["conversation"]["session_1"][:TURNS]
    conversation["session_1_date_time"] = raw["conversation"]["session_1_date_time"]
    kept = {t["dia_id"] for t in conversation["session_1"]}
    qa = [q for q in raw["qa"] if q.get("evidence") and set(q["evidence"]) <= kept
          and q.get("category") in (1, 2, 3, 4)]  # fmt: skip
    return {"sample_id": raw["sample_id"], "conversation": conversation, "qa": qa}


def _print_failures(part: str, failures: list[Any]) -> None:
    kinds: dict[tuple[str, str], int] = {}
    for record in failures:
        key = (record.stage, record.kind.value)
        kinds[key] = kinds.get(key, 0) + 1
    print(f"\nfailure records ({part}):", dict(sorted(kinds.items())) or "none")


def test_figures(wire: Wire, served: Served) -> None:
    """The table of what the tier cost (runs last in the module), the requests the server was
    sent (the eval's included), and the ledgers of our conversations."""
    print_figures(wire, FIGURES, turns=TURNS)
    print(f"the server was sent {served.chats} chat requests ({len(wire.sent)} by this"
          f" process); by stage: {dict(sorted(served.requests.items()))}")
    for name, counts in LEDGERS.items():
        print(f"ledger of {name}: {counts}")
    assert served.chats >= len(wire.sent)
