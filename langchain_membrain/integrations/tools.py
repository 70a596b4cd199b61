"""Agent tools to save, update, delete and search memories.

The tools speak to a LangGraph store, so they work the same in a plain script, in
``langchain.agents.create_agent(..., store=...)`` and in any LangGraph graph:

- ``memory_tools(memory, namespace)`` with a :class:`~.memory.MembrainMemory` (wrapped in a
  :class:`~.store.MembrainStore`) or any LangGraph ``BaseStore``;
- ``memory_tools(None, namespace)``: each call uses the store of the graph it runs in
  (``langgraph.config.get_store()``), e.g. the ``MembrainStore`` given to ``compile(store=...)``.

A namespace may hold ``{placeholders}`` filled at call time from the run's
``config["configurable"]``: ``memory_tools(store, ("memories", "{user_id}"))``.
Values are stored as ``{"content": text}``, the format langmem's memory tools use, so both
kinds of tools can share one namespace.
"""

from __future__ import annotations

import asyncio
import json
import string
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import datetime, timezone
from typing import Any

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from langgraph.store.base import BaseStore, SearchItem
from pydantic import BaseModel, Field

from ..memory import MembrainMemory
from ..retrieval.scores import DEFAULT_MIN_SCORE
from .store import MembrainStore

__all__ = ["memory_tools"]


class SaveMemoryInput(BaseModel):
    content: str = Field(description="The memory to save: one self-contained fact, written so it makes "
                                     "sense on its own later, e.g. 'The user is vegetarian'.")


class UpdateMemoryInput(BaseModel):
    memory_id: str = Field(description="The id of the memory to change, as given by save_memory or search_memory.")
    content: str = Field(description="The corrected memory, replacing the old text entirely.")


class DeleteMemoryInput(BaseModel):
    memory_id: str = Field(description="The id of the memory to delete, as given by save_memory or search_memory.")


class SearchMemoryInput(BaseModel):
    query: str = Field(description="What you want to know, in natural language, e.g. 'the user's diet'.")
    limit: int = Field(default=5, ge=1, le=50, description="How many memories to return at most.")


class _Target:
    """Where the tools read and write: a store (or the running graph's) and a namespace."""

    def __init__(self, memory: MembrainMemory | BaseStore | None, namespace: str | Sequence[str]):
        if isinstance(memory, MembrainMemory):
            memory = MembrainStore(memory)
        elif memory is not None and not isinstance(memory, BaseStore):
            raise TypeError(f"memory_tools needs a MembrainMemory, a BaseStore or None, got {type(memory).__name__}")
        self._store = memory
        self._template = tuple(namespace.split("/")) if isinstance(namespace, str) else tuple(namespace)
        if not self._template:
            raise ValueError("memory_tools needs a non-empty namespace")

    def store(self) -> BaseStore:
        if self._store is not None:
            return self._store
        from langgraph.config import get_store

        try:
            store = get_store()
        except (RuntimeError, KeyError):  # not running inside a graph
            store = None
        if store is None:
            raise ToolException("no memory store: give memory_tools a store, or run the tool inside "
                                "a LangGraph graph compiled with store=...")
        return store

    def namespace(self, config: RunnableConfig | None) -> tuple[str, ...]:
        configurable = (config or {}).get("configurable", {})
        try:
            return tuple(_format(label, configurable) for label in self._template)
        except KeyError as exc:
            raise ToolException(f"the memory namespace needs config['configurable'][{exc.args[0]!r}]") from None


def _format(label: str, values: dict[str, Any]) -> str:
    fields = [name for _, name, _, _ in string.Formatter().parse(label) if name]
    return label.format(**{name: values[name] for name in fields}) if fields else label


def _hit(item: SearchItem) -> dict[str, Any]:
    """What the agent reads of another store's hit."""
    return {"id": item.key, "content": item.value.get("content", item.value), "score": item.score}


def _date(seconds: float | None) -> str | None:
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=timezone.utc).date().isoformat()


def membrain_hits(memory: MembrainMemory, ns: tuple[str, ...], query: str, limit: int) -> list[dict[str, Any]]:
    """What the agent reads of a membrain search: the hits scoring at least
    scores.DEFAULT_MIN_SCORE, best first, each with its date (``valid_from``: when its current
    version was stated), its path in the tree and what it replaces: ``replaces``, the text of
    its former version (an UPDATE) or of the older memory listed after it that it probably
    supersedes; ``replaced_by``, on such an older memory, the id of the newer one. The
    statements that supersede a hit are listed just before it, so there may be more than
    ``limit``."""
    records = memory.search(query, namespace=ns, limit=limit, min_score=DEFAULT_MIN_SCORE)
    texts = {r.key: r.text for r in records}
    out = []
    for r in records:
        hit: dict[str, Any] = {"id": r.key, "content": r.value.get("content", r.text), "score": r.score,
                               "date": _date(r.valid_from if r.valid_from is not None else r.created_at),
                               "path": r.path}
        former = [h for h in memory.history(r.key, namespace=r.namespace) if h.status == "superseded"]
        if r.supersedes is not None:
            hit["replaces"] = texts.get(r.supersedes)
        elif former:
            hit["replaces"] = former[-1].text
        if r.probably_superseded_by is not None:
            hit["replaced_by"] = r.probably_superseded_by
        out.append(hit)
    return out


# What the agent reads about each tool (constants, not docstrings: ``python -OO`` drops those).
TOOL_DESCRIPTIONS = {
    "save_memory": ("Save a new long-term memory: a fact about the user or the task worth remembering "
                    "in later conversations (preferences, plans, facts about people). Returns its id."),
    "update_memory": "Replace the text of an existing memory when it has become wrong or outdated.",
    "delete_memory": "Delete a memory that is wrong or that the user asked you to forget.",
    "search_memory": ("Search long-term memories relevant to a question, best match first. Returns a "
                      "JSON list of {id, content, score, date, path} (score: the chance it is relevant; "
                      "date: when it was stated); 'replaces' gives what a memory replaced, and "
                      "'replaced_by' marks a memory a newer one (listed just before it) probably makes "
                      "out of date. An empty list [] means nothing relevant is remembered. Use an id to "
                      "update or delete a memory."),
}


def memory_tools(memory: MembrainMemory | BaseStore | None,
                 namespace: str | Sequence[str] = ("memories",)) -> list[BaseTool]:
    """Tools for an LLM agent to manage its long-term memory in ``namespace``.

    Args:
        memory: a MembrainMemory, a MembrainStore (or any LangGraph ``BaseStore``), or None to
            use the store of the LangGraph graph each call runs in.
        namespace: the namespace memories go to, ``"a/b"`` or a tuple; labels may hold
            ``{placeholders}`` filled from ``config["configurable"]``. Searches also cover
            the namespaces below it.

    Returns:
        ``[save_memory, update_memory, delete_memory, search_memory]``.
    """
    target = _Target(memory, namespace)
    schemas: tuple[type[BaseModel], ...] = (SaveMemoryInput, UpdateMemoryInput, DeleteMemoryInput, SearchMemoryInput)
    return [StructuredTool.from_function(func=func, coroutine=afunc, name=func.__name__, args_schema=schema,
                                         description=TOOL_DESCRIPTIONS[func.__name__],
                                         handle_tool_error=True)
            for func, afunc, schema in zip(_tool_functions(target), _async_tool_functions(target), schemas)]


def _missing(memory_id: str) -> ToolException:
    return ToolException(f"There is no memory with id {memory_id!r}; search first to find its id.")


def _tool_functions(target: _Target) -> tuple[Callable[..., str], ...]:
    """save_memory, update_memory, delete_memory and search_memory on ``target``."""

    def save_memory(content: str, config: RunnableConfig) -> str:
        store, ns = target.store(), target.namespace(config)
        if isinstance(store, MembrainStore):  # add() does not store the same memory twice
            return f"Saved memory {store.memory.add(content, namespace=ns)}."
        key = uuid.uuid4().hex
        store.put(ns, key, {"content": content})
        return f"Saved memory {key}."

    def update_memory(memory_id: str, content: str, config: RunnableConfig) -> str:
        store, ns = target.store(), target.namespace(config)
        old = store.get(ns, memory_id)
        if old is None:
            raise _missing(memory_id)
        store.put(ns, memory_id, {**old.value, "content": content})
        return f"Updated memory {memory_id}."

    def delete_memory(memory_id: str, config: RunnableConfig) -> str:
        store, ns = target.store(), target.namespace(config)
        if store.get(ns, memory_id) is None:
            raise _missing(memory_id)
        store.delete(ns, memory_id)
        return f"Deleted memory {memory_id}."

    def search_memory(query: str, config: RunnableConfig, limit: int = 5) -> str:
        store, ns = target.store(), target.namespace(config)
        if isinstance(store, MembrainStore):
            return json.dumps(membrain_hits(store.memory, ns, query, limit))
        return json.dumps([_hit(item) for item in store.search(ns, query=query, limit=limit)])

    return save_memory, update_memory, delete_memory, search_memory


def _async_tool_functions(target: _Target) -> tuple[Callable[..., Awaitable[str]], ...]:
    """The async twins of :func:`_tool_functions`: asave_memory, aupdate_memory,
    adelete_memory and asearch_memory."""

    async def asave_memory(content: str, config: RunnableConfig) -> str:
        store, ns = target.store(), target.namespace(config)
        if isinstance(store, MembrainStore):
            return f"Saved memory {await store.memory.aadd(content, namespace=ns)}."
        key = uuid.uuid4().hex
        await store.aput(ns, key, {"content": content})
        return f"Saved memory {key}."

    async def aupdate_memory(memory_id: str, content: str, config: RunnableConfig) -> str:
        store, ns = target.store(), target.namespace(config)
        old = await store.aget(ns, memory_id)
        if old is None:
            raise _missing(memory_id)
        await store.aput(ns, memory_id, {**old.value, "content": content})
        return f"Updated memory {memory_id}."

    async def adelete_memory(memory_id: str, config: RunnableConfig) -> str:
        store, ns = target.store(), target.namespace(config)
        if await store.aget(ns, memory_id) is None:
            raise _missing(memory_id)
        await store.adelete(ns, memory_id)
        return f"Deleted memory {memory_id}."

    async def asearch_memory(query: str, config: RunnableConfig, limit: int = 5) -> str:
        store, ns = target.store(), target.namespace(config)
        if isinstance(store, MembrainStore):
            return json.dumps(await asyncio.to_thread(membrain_hits, store.memory, ns, query, limit))
        return json.dumps([_hit(item) for item in await store.asearch(ns, query=query, limit=limit)])

    return asave_memory, aupdate_memory, adelete_memory, asearch_memory
