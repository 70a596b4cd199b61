"""Retrieval in several steps with an LLM (Mem-T's retrieval policy): the model searches the
memory kind by kind, as many times as it needs, then finishes.

Definitions:

- A **step** is one model turn: the model calls one or more of the tools
  ``search_facts``, ``search_experiences``, ``search_raw``, ``search_working`` (each a
  ``query`` and an optional ``k``, at most :data:`MAX_K`) and ``finish``; every call is
  answered with the hits it found, or with the error that made it unusable (an unknown tool,
  arguments that do not validate).
- The retrieval ends when the model calls ``finish``, answers without a tool call, or has
  taken ``max_steps`` steps (default 6).
- **Seen raw items are not shown again**: a raw item one step returned is left out of later
  steps' hits, so each step brings new turns.
- The **result** is every hit gathered, best score first (one per key), and the **trace**:
  one :class:`TraceEntry` per tool call, in order.

:func:`retrieval_graph` is the LangGraph ``StateGraph`` (nodes ``policy`` and ``search``) that
a user's graph can add as a subgraph; ``MembrainMemory.retrieve`` runs it once. The model is
any LangChain chat model with tool calling (``bind_tools``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Sequence, TypedDict

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field, ValidationError

from ..errors import ConfigurationError
from ..tree.records import MemoryRecord

#: Most hits one search call may ask for.
MAX_K = 20
SEARCH_TOOLS = {"search_facts": "fact", "search_experiences": "experience", "search_raw": "raw",
                "search_working": "working"}

SYSTEM = """You gather what a long-term memory holds to answer a question. Search it with \
the tools, one kind of memory per tool: facts (atomic statements), experiences (how to do \
things), raw (what was said, word for word) and working (each session's summary). Rewrite the \
query for each search ("Gina visited which cities", then "Jon visited which cities"). Raw items \
you have already seen are not shown again. Call finish when you have what the question needs."""


class SearchArgs(BaseModel):
    query: str = Field(description="what to look for, as a short question or phrase")
    k: int = Field(default=5, ge=1, le=MAX_K, description="how many hits at most")


class FinishArgs(BaseModel):
    reason: str = Field(default="", description="why what was found is enough (optional)")


@dataclass(frozen=True)
class TraceEntry:
    """One tool call of a retrieval: what was asked, and the keys it found (or its error)."""

    step: int
    tool: str
    query: str | None
    k: int | None
    found: tuple[str, ...] = ()
    error: str | None = None


@dataclass(frozen=True)
class Retrieved:
    """What a retrieval gathered: hits best first, the trace, and why it ended
    ("finish", "answer": the model stopped calling tools, or "max_steps")."""

    hits: list[MemoryRecord]
    trace: list[TraceEntry]
    ended: str


class RetrievalState(TypedDict, total=False):
    """The graph's state: the conversation with the model, the hits by key, the trace."""

    question: str
    messages: list[BaseMessage]
    hits: dict[str, MemoryRecord]
    trace: list[TraceEntry]
    steps: int
    ended: str


def retrieval_tools(memory: Any = None, namespace: str | Sequence[str] | None = None) -> list[StructuredTool]:
    """The tools of a retrieval, one per memory kind and ``finish``. With a ``memory`` they
    run (agent tools for a user's own agent: each returns its hits as JSON); without one they
    are the schemas the retrieval graph offers its model, whose calls it runs itself."""
    def tool(kind: str) -> Any:
        def run(query: str, k: int = 5) -> str:
            if memory is None:
                raise NotImplementedError("the retrieval graph runs these calls")
            return _shown(search_kind(memory, namespace, kind, query, k))
        return run

    tools = [StructuredTool.from_function(tool(kind), name=name, args_schema=SearchArgs,
                                          description=f"Search the memory's {kind} items.")
             for name, kind in SEARCH_TOOLS.items()]
    tools.append(StructuredTool.from_function(lambda reason="": "finished", name="finish", args_schema=FinishArgs,
                                              description="Stop searching: what was found is enough."))
    return tools


def search_kind(memory: Any, namespace: Any, kind: str, query: str, k: int,
                seen: set[str] | frozenset[str] = frozenset()) -> list[MemoryRecord]:
    """Up to ``k`` hits of one kind for ``query``, leaving out the keys in ``seen``. Working
    memories (one per session a teacher wrote) rank by the words they share with the query."""
    if kind == "working":
        words = set(query.casefold().split())
        found = memory.working_memories(namespace)
        found.sort(key=lambda r: -len(words & set(r.text.casefold().split())))
        return [r for r in found if r.key not in seen][:k]
    hits = memory.search(query, namespace=namespace, kinds=kind, limit=k + len(seen))
    return [h for h in hits if h.key not in seen][:k]


def _shown(found: list[MemoryRecord]) -> str:
    return json.dumps([{"id": h.key, "text": h.text, **({"sources": h.sources} if h.sources else {})}
                       for h in found])


def retrieval_graph(memory: Any, llm: BaseChatModel, namespace: str | Sequence[str] | None = None, *,
                    max_steps: int = 6) -> Any:
    """The compiled retrieval graph over ``memory``'s ``namespace``: input
    ``{"question": ...}``, output the state with ``hits``, ``trace`` and ``ended``."""
    from langgraph.graph import END, START, StateGraph

    if not isinstance(max_steps, int) or max_steps < 1:
        raise ValueError(f"max_steps is an int >= 1, not {max_steps!r}")
    model = with_tools(llm)

    def policy(state: RetrievalState) -> RetrievalState:
        messages = state.get("messages") or [SystemMessage(SYSTEM), HumanMessage(state["question"])]
        reply = model.invoke(messages)
        return {"messages": [*messages, reply], "steps": state.get("steps", 0) + 1,
                "hits": state.get("hits", {}), "trace": state.get("trace", [])}

    def search(state: RetrievalState) -> RetrievalState:
        reply = state["messages"][-1]
        hits, trace = dict(state["hits"]), list(state["trace"])
        answers: list[BaseMessage] = []
        ended = None
        for call in getattr(reply, "tool_calls", None) or []:
            entry, text = _run_call(memory, namespace, call, state["steps"], hits)
            trace.append(entry)
            answers.append(ToolMessage(text, tool_call_id=call.get("id") or entry.tool))
            if entry.tool == "finish" and entry.error is None:
                ended = "finish"
        for bad in getattr(reply, "invalid_tool_calls", None) or []:
            trace.append(TraceEntry(state["steps"], str(bad.get("name")), None, None,
                                    error=f"malformed call: {bad.get('error') or 'arguments are not JSON'}"))
            answers.append(ToolMessage(f"error: {trace[-1].error}", tool_call_id=bad.get("id") or "invalid"))
        if ended is None and state["steps"] >= max_steps:
            ended = "max_steps"
        return {"messages": [*state["messages"], *answers], "hits": hits, "trace": trace,
                **({"ended": ended} if ended else {})}

    def after_policy(state: RetrievalState) -> str:
        reply = state["messages"][-1]
        calls = isinstance(reply, AIMessage) and (reply.tool_calls or reply.invalid_tool_calls)
        return "search" if calls else "answered"

    def answered(state: RetrievalState) -> RetrievalState:
        return {"ended": "answer"}

    graph = StateGraph(RetrievalState)
    graph.add_node("policy", policy)
    graph.add_node("search", search)
    graph.add_node("answered", answered)
    graph.add_edge(START, "policy")
    graph.add_conditional_edges("policy", after_policy, ["search", "answered"])
    graph.add_conditional_edges("search", lambda s: END if s.get("ended") else "policy", ["policy", END])
    graph.add_edge("answered", END)
    return graph.compile()


def with_tools(llm: Any) -> Any:
    """``llm`` with the retrieval's tools bound; a :class:`~.errors.ConfigurationError`
    that says what to pass when it is no chat model or cannot call tools."""
    if not callable(getattr(llm, "bind_tools", None)):
        raise ConfigurationError(f"`retrieve` needs llm=, a LangChain chat model with tool calling "
                                 f"(`bind_tools`), not {type(llm).__name__}")
    try:
        return llm.bind_tools(retrieval_tools())
    except NotImplementedError:
        raise ConfigurationError(f"this chat model ({type(llm).__name__}) does not support tool calling; "
                                 "`retrieve` needs a model with `bind_tools`") from None


def retrieve(memory: Any, query: str, namespace: str | Sequence[str] | None, llm: BaseChatModel, *,
             max_steps: int = 6) -> Retrieved:
    """Run the retrieval graph once (``MembrainMemory.retrieve``)."""
    # Each step is two graph nodes (policy, search); the limit only guards against a bug.
    out = retrieval_graph(memory, llm, namespace, max_steps=max_steps).invoke(
        {"question": query}, {"recursion_limit": 4 * max_steps + 8})
    hits = sorted(out.get("hits", {}).values(), key=lambda h: -(h.score or 0.0))
    return Retrieved(hits, list(out.get("trace", [])), out.get("ended", "answer"))


def _run_call(memory: Any, namespace: Any, call: dict[str, Any], step: int,
              hits: dict[str, MemoryRecord]) -> tuple[TraceEntry, str]:
    """Run one tool call; its trace entry and the text the model reads back. A bad call is
    answered with its error, never raised."""
    name, args = str(call.get("name")), call.get("args") or {}
    if name == "finish":
        return TraceEntry(step, name, None, None), "finished"
    if name not in SEARCH_TOOLS:
        entry = TraceEntry(step, name, None, None, error=f"unknown tool {name!r}: use {', '.join(SEARCH_TOOLS)} or finish")
        return entry, f"error: {entry.error}"
    try:
        parsed = SearchArgs.model_validate(args)
    except ValidationError as exc:
        entry = TraceEntry(step, name, None, None, error=f"bad arguments: {exc.errors()[0]['msg']}")
        return entry, f"error: {entry.error}"
    seen = {key for key, h in hits.items() if h.kind == "raw"}  # raw items are shown once
    found = search_kind(memory, namespace, SEARCH_TOOLS[name], parsed.query, parsed.k, seen)
    for h in found:
        if h.key not in hits or (h.score or 0.0) > (hits[h.key].score or 0.0):
            hits[h.key] = h
    return TraceEntry(step, name, parsed.query, parsed.k, tuple(h.key for h in found)), _shown(found)
