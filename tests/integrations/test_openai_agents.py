"""The OpenAI Agents SDK session, with the real `openai-agents` runner against the scripted
OpenAI-compatible endpoint: history kept in L0 across runs, recall before each model call, tool
calls given back as items, and recalled blocks never captured."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from openai import AsyncOpenAI

from stratamem import Memory
from stratamem.errors import Unavailable
from stratamem.integrations.openai_agents import StratamemSession
from stratamem.testing import Reply, ScriptedLLM


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)  # the SDK exports traces to OpenAI unless told not to
    yield


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    with Memory(data_dir=tmp_path / "data", embedder="hash:64") as opened:
        yield opened


@function_tool
def walk_length(dog: str) -> str:
    """How far a dog should walk today."""
    return f"{dog}: 4 km"


def _agent(llm: ScriptedLLM) -> Agent[Any]:
    client = AsyncOpenAI(base_url=llm.base_url, api_key="scripted", max_retries=0)
    model = OpenAIChatCompletionsModel(model="scripted-chat", openai_client=client)
    return Agent(name="helper", instructions="Be brief.", model=model, tools=[walk_length])


def _tool_call(name: str, arguments: str) -> Reply:
    message = {"role": "assistant", "content": None, "tool_calls": [{
        "id": "call-1", "type": "function", "function": {"name": name, "arguments": arguments}}]}
    return Reply.raw({"id": "x", "object": "chat.completion", "created": 0, "model": "m",
                      "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls"}]})


async def test_history_lives_in_l0_and_recall_comes_before_each_call(memory: Memory) -> None:
    session = StratamemSession(memory, "maya", "chat-1")
    config = RunConfig(session_input_callback=session.with_recall)
    memory.add_memory("maya", "Wants the dog's walks in kilometres", type="instruction")
    with ScriptedLLM() as llm:
        agent = _agent(llm)
        llm.push(Reply.text("Nice to meet Biscuit!"))
        await Runner.run(agent, "I adopted a dog called Biscuit", session=session,
                         run_config=config)  # fmt: skip
        llm.push(_tool_call("walk_length", '{"dog": "Biscuit"}'), Reply.text("Walk 4 km."))
        result = await Runner.run(agent, "How far should my dog walk?", session=session,
                                  run_config=config)  # fmt: skip
        second = llm.calls()[1].messages
    assert result.final_output == "Walk 4 km."
    recalled = [m["content"] for m in second if m["role"] == "system" and "stratamem" in
                str(m["content"])]  # fmt: skip
    assert recalled and "kilometres" in recalled[0]
    # the session's own last turns are in the history already: recall leaves them out
    assert "I adopted a dog called Biscuit" not in recalled[0]
    assert [m["content"] for m in second if m["role"] == "user"] == [
        "I adopted a dog called Biscuit", "How far should my dog walk?"]  # fmt: skip
    turns = memory.turns("maya", "chat-1")
    assert [(t.role.value, t.text) for t in turns] == [
        ("user", "I adopted a dog called Biscuit"),
        ("assistant", "Nice to meet Biscuit!"),
        ("user", "How far should my dog walk?"),
        ("assistant", 'walk_length({"dog": "Biscuit"})'),
        ("tool", "Biscuit: 4 km"),
        ("assistant", "Walk 4 km."),
    ]
    assert not any("stratamem-recall" in t.text for t in turns)  # recall never captured


async def test_items_come_back_as_they_were_added(memory: Memory) -> None:
    session = StratamemSession(memory, "maya", "chat-2")
    long_output = "\n".join(["row"] * 5000)  # capture trims surrounding white space
    items: list[Any] = [
        {"role": "user", "content": "list the rows"},
        {"type": "function_call", "call_id": "c1", "name": "rows", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": long_output},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "5000 rows", "annotations": []}]},
    ]
    await session.add_items(items)
    assert await session.get_items() == items
    assert await session.get_items(limit=2) == items[2:]
    with pytest.raises(Unavailable):
        await session.pop_item()
    await session.clear_session()
    assert await session.get_items() == []
