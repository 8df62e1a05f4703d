"""The LangGraph store and memory tools, in a real `langgraph` graph driven by a scripted chat
model: recall before the model, a memory tool call, versions and forgetting through the store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from langgraph.store.base import BaseStore

from stratamem import Memory
from stratamem.errors import InvalidInput
from stratamem.integrations.langgraph import StratamemStore, memory_tools

CALL = {"name": "remember", "id": "call-1", "type": "tool_call",
        "args": {"content": "Has a dog called Biscuit"}}  # fmt: skip
REMEMBER = AIMessage("", tool_calls=[CALL])


@pytest.fixture
def memory(tmp_path: Path) -> Iterator[Memory]:
    with Memory(data_dir=tmp_path / "data", embedder="hash:64") as opened:
        yield opened


def _graph(memory: Memory, replies: list[BaseMessage]):  # type: ignore[no-untyped-def]
    model = GenericFakeChatModel(messages=iter(replies))
    tools = memory_tools(memory, "alice", session="chat-1")

    def recall(state: MessagesState, *, store: BaseStore) -> dict[str, list[BaseMessage]]:
        query = str(state["messages"][-1].content)
        found = store.search(("alice",), query=query, limit=3)
        known = "\n".join(f"- {item.value['content']}" for item in found)
        return {"messages": [SystemMessage(f"What you know about the user:\n{known}")]}

    def agent(state: MessagesState) -> dict[str, list[BaseMessage]]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(MessagesState)
    builder.add_node("recall", recall)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "recall")
    builder.add_edge("recall", "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(store=StratamemStore(memory))


def test_a_graph_recalls_through_the_store_and_remembers_through_a_tool(memory: Memory) -> None:
    store = StratamemStore(memory)
    store.put(("alice",), "units", {"content": "Wants distances in kilometres",
                                    "type": "instruction"})  # fmt: skip
    graph = _graph(memory, [REMEMBER, AIMessage("Walk Biscuit 3 kilometres.")])
    state = graph.invoke({"messages": [HumanMessage("How far in kilometres should I walk?")]})
    recalled, *_, last = state["messages"][1:]
    assert "Wants distances in kilometres" in str(recalled.content)
    assert state["messages"][3].content.startswith("remembered [m_")  # the tool's answer
    assert last.content == "Walk Biscuit 3 kilometres."
    stated = memory.list_memories("alice", sessions=["chat-1"])
    assert [(m.content, m.type.value, m.mode.value) for m in stated] == [
        ("Has a dog called Biscuit", "persona", "manual")]  # fmt: skip
    found = store.search(("alice", "chat-1"), query="dog")
    assert [(i.namespace, i.value["content"]) for i in found] == [
        (("alice", "chat-1"), "Has a dog called Biscuit")]  # fmt: skip


def test_put_versions_get_follows_and_delete_forgets(memory: Memory) -> None:
    store = StratamemStore(memory)
    store.put(("alice",), "k", {"content": "Lives in Lyon"})
    store.put(("alice",), "k", {"content": "Lives in Grenoble"})
    item = store.get(("alice",), "k")
    assert item is not None and item.key == "k"
    assert item.value == {"content": "Lives in Grenoble", "type": "persona", "priority": 50}
    [current] = memory.list_memories("alice")
    assert [m.content for m in memory.memory_history("alice", current.id)] == [
        "Lives in Lyon", "Lives in Grenoble"]  # fmt: skip
    store.delete(("alice",), "k")
    assert store.get(("alice",), "k") is None
    assert store.search(("alice",), query="Grenoble") == []
    assert len(memory.memory_history("alice", current.id)) == 2  # forgotten, not erased


def test_json_values_filters_and_namespaces(memory: Memory) -> None:
    store = StratamemStore(memory)
    store.put(("alice", "s1"), "trip", {"city": "Oslo", "days": 4})
    store.put(("alice", "s2"), "note", {"content": "Allergic to peanuts"})
    assert store.get(("alice", "s1"), "trip").value == {"city": "Oslo", "days": 4}  # type: ignore[union-attr]
    assert store.get(("alice", "s2"), "trip") is None
    assert [i.key for i in store.search(("alice",), filter={"city": "Oslo"})] == ["trip"]
    assert store.list_namespaces(prefix=("alice",)) == [("alice",), ("alice", "s1"),
                                                        ("alice", "s2")]  # fmt: skip
    with pytest.raises(InvalidInput, match="namespace"):
        store.put(("alice", "s1", "deeper"), "k", {"content": "x"})
    with pytest.raises(NotImplementedError, match="TTL"):  # langgraph's own refusal
        store.put(("alice",), "k", {"content": "x"}, ttl=5)


async def test_the_async_api_of_the_store(memory: Memory) -> None:
    store = StratamemStore(memory)
    await store.aput(("alice",), "k", {"content": "Plays the cello"})
    item = await store.aget(("alice",), "k")
    assert item is not None and item.value["content"] == "Plays the cello"
    [hit] = await store.asearch(("alice",), query="cello")
    assert hit.key == "k" and hit.score is not None and hit.score > 0
