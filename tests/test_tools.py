"""Agent tools: membrain's own, in and out of LangGraph graphs, and langmem's over MembrainStore."""

from __future__ import annotations

import json
import uuid

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import AIMessage, ToolMessage
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langmem import create_manage_memory_tool, create_search_memory_tool

from langchain_membrain.integrations.store import MembrainStore
from langchain_membrain.integrations.tools import memory_tools
from langchain_membrain.memory import MembrainMemory

ALICE = {"configurable": {"user_id": "alice"}}


@pytest.fixture
def store() -> MembrainStore:
    return MembrainStore(MembrainMemory(embeddings=DeterministicFakeEmbedding(size=32)))


def by_name(tools) -> dict:
    return {t.name: t for t in tools}


def saved_id(message: str) -> str:
    assert message.startswith("Saved memory ")
    return message.removeprefix("Saved memory ").rstrip(".")


# ------------------------------------------------------------------ our tools
def test_tools_have_names_descriptions_and_argument_schemas(store):
    tools = by_name(memory_tools(store, "memories"))
    assert list(tools) == ["save_memory", "update_memory", "delete_memory", "search_memory"]
    for tool in tools.values():
        assert len(tool.description) > 40
        schema = tool.tool_call_schema.model_json_schema()
        assert "config" not in schema["properties"]  # injected, not asked of the model
        assert all(p.get("description") for p in schema["properties"].values())
    assert tools["search_memory"].tool_call_schema.model_json_schema()["required"] == ["query"]


def test_save_search_update_delete_round_trip(store):
    tools = by_name(memory_tools(store, ("memories", "{user_id}")))
    key = saved_id(tools["save_memory"].invoke({"content": "Alice is vegetarian"}, ALICE))
    tools["save_memory"].invoke({"content": "Alice lives in Lisbon"}, ALICE)
    created = store.get(("memories", "alice"), key)
    assert created.value == {"content": "Alice is vegetarian"}

    hits = json.loads(tools["search_memory"].invoke({"query": "Alice is vegetarian", "limit": 1}, ALICE))
    assert [h["id"] for h in hits] == [key]
    assert hits[0]["content"] == "Alice is vegetarian" and hits[0]["path"] == [] and hits[0]["score"] > 0.9

    assert tools["update_memory"].invoke({"memory_id": key, "content": "Alice is vegan"}, ALICE) == f"Updated memory {key}."
    updated = store.get(("memories", "alice"), key)
    assert updated.value == {"content": "Alice is vegan"} and updated.created_at == created.created_at

    assert tools["delete_memory"].invoke({"memory_id": key}, ALICE) == f"Deleted memory {key}."
    assert store.get(("memories", "alice"), key) is None
    assert len(store.search(("memories", "alice"))) == 1


def test_update_keeps_other_value_fields(store):
    store.put(("memories", "alice"), "k", {"content": "old", "source": "import"})
    by_name(memory_tools(store, "memories/{user_id}"))["update_memory"].invoke(
        {"memory_id": "k", "content": "new"}, ALICE)
    assert store.get(("memories", "alice"), "k").value == {"content": "new", "source": "import"}


def test_errors_come_back_to_the_model_as_text(store):
    tools = by_name(memory_tools(store, ("memories", "{user_id}")))
    for name, args in [("update_memory", {"memory_id": "nope", "content": "x"}), ("delete_memory", {"memory_id": "nope"})]:
        assert "no memory with id 'nope'" in tools[name].invoke(args, ALICE)
    assert "user_id" in tools["save_memory"].invoke({"content": "x"})  # no config to fill the namespace
    assert store.list_namespaces() == []


def test_namespaces_are_filled_per_call(store):
    save = by_name(memory_tools(store, ("memories", "{user_id}")))["save_memory"]
    save.invoke({"content": "Alice fact"}, ALICE)
    save.invoke({"content": "Bob fact"}, {"configurable": {"user_id": "bob"}})
    assert store.list_namespaces() == [("memories", "alice"), ("memories", "bob")]


def test_tools_accept_a_membrain_memory():
    memory = MembrainMemory(embeddings=DeterministicFakeEmbedding(size=32))
    tools = by_name(memory_tools(memory, "memories"))
    key = saved_id(tools["save_memory"].invoke({"content": "The sky is blue"}))
    assert memory.get(key, namespace="memories").text == "The sky is blue"


async def test_async_tools_match_sync_ones(store):
    tools = by_name(memory_tools(store, ("memories", "{user_id}")))
    key = saved_id(await tools["save_memory"].ainvoke({"content": "Alice is vegetarian"}, ALICE))
    hits = json.loads(await tools["search_memory"].ainvoke({"query": "Alice is vegetarian"}, ALICE))
    assert hits == json.loads(tools["search_memory"].invoke({"query": "Alice is vegetarian"}, ALICE))
    assert hits[0]["id"] == key
    await tools["update_memory"].ainvoke({"memory_id": key, "content": "Alice is vegan"}, ALICE)
    assert store.get(("memories", "alice"), key).value["content"] == "Alice is vegan"
    await tools["delete_memory"].ainvoke({"memory_id": key}, ALICE)
    assert store.get(("memories", "alice"), key) is None
    assert "no memory" in await tools["delete_memory"].ainvoke({"memory_id": key}, ALICE)


def tool_graph(tools, store):
    """A graph that runs the tool calls of the last AI message, compiled with ``store``."""
    builder = StateGraph(MessagesState)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "tools")
    return builder.compile(store=store)


def call(name: str, **args) -> dict:
    return {"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:8]}", "type": "tool_call"}


def test_tools_without_a_store_use_the_graphs_store(store):
    graph = tool_graph(memory_tools(None, ("memories", "{user_id}")), store)
    graph.invoke({"messages": [AIMessage("", tool_calls=[call("save_memory", content="Alice is vegetarian")])]}, ALICE)
    [item] = store.search(("memories", "alice"))
    assert item.value == {"content": "Alice is vegetarian"}
    out = graph.invoke({"messages": [AIMessage("", tool_calls=[call("search_memory", query="Alice is vegetarian")])]},
                       ALICE)
    assert json.loads(out["messages"][-1].content)[0]["id"] == item.key


async def test_tools_without_a_store_use_the_graphs_store_async(store):
    graph = tool_graph(memory_tools(None, ("memories", "{user_id}")), store)
    await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call("save_memory", content="Alice is vegan")])]},
                        ALICE)
    assert [i.value for i in store.search(("memories", "alice"))] == [{"content": "Alice is vegan"}]


def test_tools_without_a_store_outside_a_graph_or_in_a_storeless_graph_say_so():
    tools = memory_tools(None, "memories")
    assert "no memory store" in by_name(tools)["save_memory"].invoke({"content": "x"})
    out = tool_graph(tools, None).invoke({"messages": [AIMessage("", tool_calls=[call("save_memory", content="x")])]})
    assert "no memory store" in out["messages"][-1].content


def test_memory_tools_refuses_bad_arguments(store):
    with pytest.raises(TypeError):
        memory_tools("not a store", "memories")
    with pytest.raises(ValueError):
        memory_tools(store, ())


# ------------------------------------------------------------- langmem's tools
def test_langmem_manage_and_search_tools_work_over_membrain_store(store):
    namespace = ("memories", "{langgraph_user_id}")
    manage = create_manage_memory_tool(namespace=namespace, store=store)
    search = create_search_memory_tool(namespace=namespace, store=store)
    config = {"configurable": {"langgraph_user_id": "alice"}}

    created = manage.invoke({"content": "Alice prefers dark mode", "action": "create"}, config)
    key = created.removeprefix("created memory ")
    assert store.get(("memories", "alice"), key).value == {"content": "Alice prefers dark mode"}

    found = json.loads(search.invoke({"query": "Alice prefers dark mode"}, config))
    assert found[0]["key"] == key and found[0]["namespace"] == ["memories", "alice"]
    # the only memory, every word matched: relevance(1.0) (its cosine has no others to stand out from)
    assert found[0]["value"] == {"content": "Alice prefers dark mode"} and found[0]["score"] > 0.85

    before = store.get(("memories", "alice"), key)
    manage.invoke({"content": "Alice prefers light mode", "action": "update", "id": key}, config)
    after = store.get(("memories", "alice"), key)
    assert after.value == {"content": "Alice prefers light mode"} and after.created_at == before.created_at

    assert manage.invoke({"action": "delete", "id": key}, config) == f"Deleted memory {key}"
    assert store.search(("memories", "alice")) == []


async def test_langmem_tools_async_and_in_a_graph(store):
    namespace = ("memories", "{langgraph_user_id}")
    manage = create_manage_memory_tool(namespace=namespace)  # no store: langmem calls get_store()
    search = create_search_memory_tool(namespace=namespace)
    graph = tool_graph([manage, search], store)
    config = {"configurable": {"langgraph_user_id": "bob"}}
    await graph.ainvoke({"messages": [AIMessage("", tool_calls=[
        call("manage_memory", content="Bob likes jazz", action="create")])]}, config)
    [item] = store.search(("memories", "bob"))
    assert item.value == {"content": "Bob likes jazz"}
    out = await graph.ainvoke({"messages": [AIMessage("", tool_calls=[call("search_memory", query="Bob likes jazz")])]},
                              config)
    result = out["messages"][-1]
    assert isinstance(result, ToolMessage) and json.loads(result.content)[0]["key"] == item.key


async def test_saving_a_memory_again_returns_the_same_id(store):
    tools = by_name(memory_tools(store, ("memories", "{user_id}")))
    key = saved_id(tools["save_memory"].invoke({"content": "Alice is vegetarian"}, ALICE))
    assert saved_id(tools["save_memory"].invoke({"content": "alice is vegetarian."}, ALICE)) == key
    assert saved_id(await tools["save_memory"].ainvoke({"content": "Alice is vegetarian"}, ALICE)) == key
    assert [item.key for item in store.search(("memories", "alice"))] == [key]


def test_tools_keep_their_descriptions_under_python_oo():
    """An agent reads each tool's description; ``python -OO`` strips docstrings, not them."""
    import subprocess
    import sys

    code = ("from langchain_membrain.integrations.tools import memory_tools; from langgraph.store.memory import InMemoryStore; "
            "print([len(t.description) for t in memory_tools(InMemoryStore())])")
    out = subprocess.run([sys.executable, "-OO", "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert all(n > 40 for n in json.loads(out.stdout.strip()))
