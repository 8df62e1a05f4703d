"""Compaction by fill level: summaries best first where shorter, oldest history dropped, the
tail and tool-call/result pairs kept whole, diagrams of dropped work injected within a share."""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import pytest

from stratamem.domain import Mode
from stratamem.offload import Diagram, Entry, Level, OffloadSettings, TaskStatus
from stratamem.offload.compaction import compact, level_for, summary_text
from stratamem.offload.tokens import context_tokens

SETTINGS = OffloadSettings()


def entry(call_id: str, score: int, summary: str = "short summary", task: str = "t1") -> Entry:
    return Entry("s", call_id, "tool", summary, score, f"ref-{call_id}", 0.0, 4000,
                 Mode.LLM, task, "n1")  # fmt: skip


def exchange(call_id: str, result_chars: int = 4000) -> list[dict[str, Any]]:
    call = {"id": call_id, "type": "function", "function": {"name": "tool", "arguments": "{}"}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": call_id, "content": "r" * result_chars},
    ]


def context(calls: Sequence[str], tail_calls: Sequence[str] = ()) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "agent"},
        {"role": "user", "content": "first task"},
    ]
    for call_id in calls:
        messages += exchange(call_id)
    messages.append({"role": "user", "content": "latest question"})
    for call_id in tail_calls:
        messages += exchange(call_id)
    return messages


def pairs_whole(messages: list[dict[str, Any]]) -> bool:
    open_calls: set[str] = set()
    for message in messages:
        for call in message.get("tool_calls") or []:
            open_calls.add(call["id"])
        if message["role"] == "tool" and message["tool_call_id"] not in open_calls:
            return False
    return True


def test_levels_follow_the_fill_ratio() -> None:
    assert level_for(49, 100, SETTINGS) is Level.NONE
    assert level_for(50, 100, SETTINGS) is Level.MILD
    assert level_for(85, 100, SETTINGS) is Level.AGGRESSIVE
    assert level_for(95, 100, SETTINGS) is Level.EMERGENCY
    tuned = OffloadSettings(mild_ratio=0.3, aggressive_ratio=0.4, emergency_ratio=0.5)
    assert level_for(45, 100, tuned) is Level.AGGRESSIVE


def test_under_the_mild_threshold_nothing_changes() -> None:
    messages = context(["a"])
    result = compact(messages, 100_000, {"a": entry("a", 10)}, [], SETTINGS)
    assert result.level is Level.NONE and result.messages == messages


def test_mild_replaces_best_scores_first_only_where_shorter() -> None:
    messages = context(["a", "b", "c", "d"])
    tokens = context_tokens(messages)
    entries = {
        "a": entry("a", 7),
        "b": entry("b", 9),
        "c": entry("c", 5),  # below the mild minimum score
        "d": entry("d", 10, summary="x" * 5000),  # longer than the result: kept as it is
    }
    result = compact(messages, int(tokens / 0.6), entries, [], SETTINGS)
    assert result.level is Level.MILD
    assert result.replaced == ("b",)  # one replacement reached the target
    assert result.dropped_messages == 0
    contents = {m.get("tool_call_id"): m["content"] for m in result.messages if m["role"] == "tool"}
    assert contents["b"] == summary_text(entries["b"]) and "ref-b" in contents["b"]
    assert result.tokens_after <= int(tokens / 0.6 * 0.5)


def test_aggressive_drops_the_oldest_keeps_the_tail_and_pairs_whole() -> None:
    messages = context(["a", "b", "c", "d"], tail_calls=["e"])
    tokens = context_tokens(messages)
    entries = {k: entry(k, 1) for k in "abcde"}  # too low to replace at this level
    diagram = Diagram("t1", "s", "Fix it", TaskStatus.ACTIVE, False,
                      'flowchart TD\n    n1["Work"]', 1, 0.0, 0.0)  # fmt: skip
    result = compact(messages, int(tokens / 0.9), entries, [diagram], SETTINGS)
    assert result.level is Level.AGGRESSIVE and result.replaced == ()
    assert result.dropped_messages > 0 and pairs_whole(result.messages)
    tail_at = messages.index({"role": "user", "content": "latest question"})
    assert result.messages[-3:] == messages[tail_at:]
    assert result.messages[0] == messages[0]
    assert result.diagrams == ("t1",)
    assert "```mermaid" in result.messages[1]["content"]
    assert result.tokens_after < result.tokens_before


def test_emergency_replaces_tail_results_too() -> None:
    messages = context(["a"], tail_calls=["e"])
    tokens = context_tokens(messages)
    entries = {"a": entry("a", 0), "e": entry("e", 0)}
    result = compact(messages, tokens, entries, [], SETTINGS)
    assert result.level is Level.EMERGENCY and "e" in result.replaced
    assert pairs_whole(result.messages) and result.messages[-2]["tool_calls"][0]["id"] == "e"


@pytest.mark.parametrize("share", [0.0, 0.1])
def test_diagrams_stay_within_their_share(share: float) -> None:
    messages = context(["a", "b", "c"])
    tokens = context_tokens(messages)
    budget = int(tokens / 0.9)
    huge = 'flowchart TD\n' + "\n".join(f"    n{i} --> n{i + 1}" for i in range(400))
    diagram = Diagram("t1", "s", "Big", TaskStatus.ACTIVE, True, huge, 3, 0.0, 0.0)
    settings = OffloadSettings(diagram_budget_share=share)
    entries = {k: entry(k, 1) for k in "abc"}
    result = compact(messages, budget, entries, [diagram], settings)
    assert result.diagrams == ()
    injected = result.messages[1]["content"]
    assert len(injected) // 4 <= max(int(budget * share), 20)


@pytest.mark.parametrize("seed", range(40))
def test_invariants_hold_on_random_contexts(seed: int) -> None:
    rng = random.Random(seed)
    messages: list[dict[str, Any]] = [{"role": "system", "content": "agent"}]
    entries: dict[str, Entry] = {}
    for n in range(rng.randint(1, 30)):
        if rng.random() < 0.3:
            messages.append({"role": "user", "content": "q" * rng.randint(1, 400)})
        calls = [f"c{n}_{k}" for k in range(rng.randint(1, 3))]
        messages.append({"role": "assistant", "content": None,
                         "tool_calls": [{"id": c} for c in calls]})  # fmt: skip
        for call in calls:
            messages.append(
                {"role": "tool", "tool_call_id": call, "content": "r" * rng.randint(5, 6000)}
            )
            if rng.random() < 0.8:
                entries[call] = entry(call, rng.randint(0, 10), "s" * rng.randint(5, 300))
    before = context_tokens(messages)
    budget = max(1, int(before / rng.uniform(0.3, 4.0)))
    result = compact(messages, budget, entries, [], SETTINGS)
    out = result.messages
    assert pairs_whole(out) and out[0] == messages[0]
    assert result.tokens_after <= result.tokens_before == before
    last_user = max((i for i, m in enumerate(messages) if m["role"] == "user"), default=None)
    if last_user is not None and result.level is not Level.EMERGENCY:
        assert out[-(len(messages) - last_user):] == messages[last_user:]
    originals = {m.get("tool_call_id"): m["content"] for m in messages if m["role"] == "tool"}
    for message in out:
        if message["role"] == "tool" and message["content"] != originals[message["tool_call_id"]]:
            entry_ = entries[message["tool_call_id"]]
            assert message["content"] == summary_text(entry_)
            assert len(message["content"]) < len(originals[message["tool_call_id"]])
