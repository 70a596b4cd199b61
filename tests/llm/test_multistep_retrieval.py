"""Retrieval in several steps with an LLM (multistep.py), against the local chat-completions
server through ChatOpenAI: the model searches kind by kind and finishes; steps are bounded;
raw items already shown are not shown again; bad tool calls are answered, not raised."""

from __future__ import annotations

import json

import pytest
from helpers import WordEmbeddings
from langchain_openai import ChatOpenAI
from openai_server import tool_calls

from langchain_membrain import MembrainMemory
from langchain_membrain.retrieval.multistep import retrieval_graph


@pytest.fixture
def memory():
    with MembrainMemory(embeddings=WordEmbeddings(), background=False) as m:
        m.add("Gina visited Rome in June", namespace="u", kind="fact")
        m.add("Jon visited Paris and Berlin", namespace="u", kind="fact")
        m.add("always check both calendars before a trip", namespace="u", kind="experience")
        for said in ("Gina: Rome was hot!", "Jon: Berlin in winter, brr", "Gina: I loved the Colosseum"):
            m.add(said, namespace="u", kind="raw")
        m.add("Gina and Jon compare their trips", namespace="u", kind="working", session="s1")
        yield m


def chat(server) -> ChatOpenAI:
    return ChatOpenAI(model="test-model", base_url=server.base_url, api_key="x", max_retries=0, timeout=5)


def test_the_model_searches_kind_by_kind_then_finishes(server, memory):
    server.push(tool_calls(("search_facts", {"query": "Gina visited which cities", "k": 2})),
                tool_calls(("search_facts", {"query": "Jon visited which cities", "k": 2}),
                           ("search_experiences", {"query": "trip"})),
                tool_calls(("finish", {"reason": "both travellers found"})))
    got = memory.retrieve("Which cities did Gina and Jon visit?", "u", llm=chat(server))
    assert got.ended == "finish" and len(server.requests) == 3
    assert [(e.step, e.tool, e.query) for e in got.trace] == [
        (1, "search_facts", "Gina visited which cities"), (2, "search_facts", "Jon visited which cities"),
        (2, "search_experiences", "trip"), (3, "finish", None)]
    texts = {h.text for h in got.hits}
    assert {"Gina visited Rome in June", "Jon visited Paris and Berlin",
            "always check both calendars before a trip"} <= texts
    # the model read each call's hits back, as tool messages
    last = server.requests[-1]["messages"]
    shown = [json.loads(m["content"]) for m in last if m["role"] == "tool" and m["content"].startswith("[")]
    assert any(h["text"] == "Gina visited Rome in June" for hits in shown for h in hits)


def test_raw_items_already_shown_are_left_out_of_later_steps(server, memory):
    server.push(tool_calls(("search_raw", {"query": "Gina Rome", "k": 1})),
                tool_calls(("search_raw", {"query": "Gina Rome", "k": 1})),
                tool_calls(("finish", {})))
    got = memory.retrieve("What did Gina say about Rome?", "u", llm=chat(server))
    first, second = got.trace[0].found, got.trace[1].found
    assert len(first) == len(second) == 1 and first != second
    assert all(h.kind == "raw" for h in got.hits) and len(got.hits) == 2


def test_a_model_that_never_finishes_is_stopped_after_max_steps(server, memory):
    server.responder = lambda req: tool_calls(("search_facts", {"query": "anything"}))
    got = memory.retrieve("Where did Gina go?", "u", llm=chat(server), max_steps=3)
    assert got.ended == "max_steps" and len(server.requests) == 3
    assert [e.step for e in got.trace] == [1, 2, 3]


def test_malformed_tool_calls_are_answered_with_their_error(server, memory):
    server.push(tool_calls(("search_facts", "{not json"), ("search_everything", {"query": "x"}),
                           ("search_facts", {"query": "Gina", "k": 500})),
                tool_calls(("search_working", {"query": "trips"})),
                tool_calls())
    got = memory.retrieve("Where did Gina go?", "u", llm=chat(server))
    errors = [e.error for e in got.trace[:3]]
    assert "malformed" in errors[2] or "malformed" in errors[0]
    assert any("unknown tool 'search_everything'" in (e or "") for e in errors)
    assert any("bad arguments" in (e or "") for e in errors)
    assert got.trace[3].tool == "search_working" and got.trace[3].found == ("working:s1",)
    assert got.ended == "answer"
    errors_read = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "tool"]
    assert len(errors_read) == 3 and all(c.startswith("error:") for c in errors_read)


def test_the_retrieval_graph_runs_as_a_subgraph(server, memory):
    from typing import TypedDict

    from langgraph.graph import END, START, StateGraph

    class Outer(TypedDict, total=False):
        question: str
        hits: dict
        trace: list
        ended: str

    server.push(tool_calls(("search_facts", {"query": "Jon"})), tool_calls(("finish", {})))
    outer = StateGraph(Outer)
    outer.add_node("recall", retrieval_graph(memory, chat(server), "u", max_steps=4))
    outer.add_edge(START, "recall")
    outer.add_edge("recall", END)
    out = outer.compile().invoke({"question": "Where did Jon go?"})
    assert out["ended"] == "finish" and any("Jon" in h.text for h in out["hits"].values())


def test_the_kind_tools_run_in_a_users_own_agent(memory):
    from langchain_membrain.retrieval.multistep import retrieval_tools

    tools = {t.name: t for t in retrieval_tools(memory, "u")}
    assert set(tools) == {"search_facts", "search_experiences", "search_raw", "search_working", "finish"}
    facts = json.loads(tools["search_facts"].invoke({"query": "Gina Rome", "k": 1}))
    assert [h["text"] for h in facts] == ["Gina visited Rome in June"]
    assert json.loads(tools["search_working"].invoke({"query": "trips"}))[0]["id"] == "working:s1"
    assert tools["finish"].invoke({}) == "finished"
