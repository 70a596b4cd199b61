"""`MembrainStore`: a LangGraph :class:`~langgraph.store.base.BaseStore` over a
:class:`~.memory.MembrainMemory`.

Each namespace (a tuple of strings) is one membrain tree. The store is a thin translation
layer: every LangGraph op becomes one call on the memory, and every result comes back as
LangGraph's own :class:`~langgraph.store.base.Item` / :class:`~langgraph.store.base.SearchItem`
with the value exactly as the caller stored it.

Semantics (LangGraph's, with a few deliberate improvements over ``InMemoryStore``):

- ``put`` inserts or replaces; ``created_at`` survives updates; a changed text re-places the
  fact in its tree. ``put(..., index=False)`` stores without embedding: the item is found by
  ``get``, by filter-only searches and by listings, not by a ``query``.
- ``search(prefix, query=..., filter=..., limit=..., offset=...)`` spans every namespace under
  the prefix (``()`` is the whole store); best first with a query, newest first without.
  A hit's ``score`` is its relevance in ``[0, 1]``, as ``MembrainMemory.search`` reports it
  (``retrieval.relevance``). A negative ``limit`` or ``offset`` raises
  :class:`~.errors.InvalidOperationError`, as the memory's search does.
- Reads never create anything: getting or searching an unknown namespace returns nothing
  and leaves no empty namespace behind. A namespace whose last item is deleted disappears
  from ``list_namespaces``.
- ``delete`` (and ``put(..., None)``) keeps the item's last version as a tombstone in its
  history (``store.memory.history(key, namespace=...)``: status ``"deleted"``, with the
  time of deletion); ``store.memory.purge_history`` forgets it for good.
- A namespace or prefix may be a tuple, a list or a ``"a/b"`` string.
- The ops of one ``batch`` run in order, so a ``GetOp`` after a ``PutOp`` on the same key
  sees the new value; every op is validated before the first one runs.
- A value whose ``"kind"`` is ``"experience"`` (or any value, under ``index={"kind":
  "experience"}``) is stored as an experience; search it with ``filter={"kind": ...}`` on
  the value, or ``store.memory.search(..., kinds=...)``.
- TTL is not supported (``supports_ttl = False``): an op with a ``ttl`` raises
  :class:`NotImplementedError`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import inspect
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from typing import Any, Callable, cast

from langchain_core.embeddings import Embeddings
from langgraph.store.base import (
    BaseStore,
    GetOp,
    IndexConfig,
    InvalidNamespaceError,
    Item,
    ListNamespacesOp,
    MatchCondition,
    Op,
    PutOp,
    Result,
    SearchItem,
    SearchOp,
    ensure_embeddings,
)

from ..errors import InvalidOperationError
from ..memory import MembrainMemory
from ..tree.inputs import Namespace
from ..tree.records import MemoryRecord

__all__ = ["MembrainStore"]


#: Embedder names resolved without any network access (all name the bundled MiniLM).
OFFLINE_EMBEDDERS = frozenset(
    {"minilm", "membrain:minilm", "all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2"}
)
_RESERVED_ROOT = "langgraph"
_NO_LIMIT = sys.maxsize


class MembrainStore(BaseStore):
    """LangGraph long-term memory store whose namespaces are membrain trees.

    Args:
        memory: the :class:`~.memory.MembrainMemory` to serve; a new in-memory one (the
            bundled MiniLM embedder, the default teacher) when omitted.
        index: LangGraph's :class:`~langgraph.store.base.IndexConfig`:

            - ``embed``: a LangChain ``Embeddings``, a sync or async function
              ``texts -> vectors``, or the name of an embedder resolvable offline
              (``"minilm"``; see :data:`OFFLINE_EMBEDDERS`). Only with ``memory=None``
              (a given memory already has its embedder).
            - ``fields``: value fields whose text is embedded (several are joined);
              default ``content``, then ``text``, else the JSON of the value.
            - ``dims``: checked against the embedder's ``dimensions`` when it declares one.

    Example:
        ```python
        store = MembrainStore()
        store.put(("users", "alice"), "colour", {"content": "Alice's favourite colour is teal"})
        store.search(("users",), query="what colour does Alice like?")
        ```
    """

    supports_ttl = False

    def __init__(self, memory: MembrainMemory | None = None, *, index: IndexConfig | None = None):
        spec: dict[str, Any] = dict(index or {})
        embed = spec.get("embed")
        if memory is None:
            memory = MembrainMemory(embeddings=_resolve_embeddings(embed))
            self._owns_memory = True
        else:
            if embed is not None and embed is not memory.embeddings:
                raise ValueError(
                    "index['embed'] cannot replace the embedder of a given MembrainMemory; "
                    "pass embeddings=... to MembrainMemory instead"
                )
            self._owns_memory = False
        dims = spec.get("dims")
        declared = getattr(memory.embeddings, "dimensions", None)
        if dims is not None and isinstance(declared, int) and dims != declared:
            raise ValueError(f"index['dims'] is {dims} but the embedder makes {declared}-d vectors")
        fields = spec.get("fields")
        self.memory = memory
        self.index_fields: list[str] | None = list(fields) if fields else None
        self.index_config: IndexConfig | None = cast(IndexConfig, spec) if spec else None
        self.default_kind = spec.get("kind", "fact")
        if self.default_kind not in ("fact", "experience"):
            raise ValueError(f"index['kind'] is 'fact' or 'experience', not {self.default_kind!r}")

    @classmethod
    def from_conn_string(cls, path_or_url: str, *, index: IndexConfig | None = None) -> "MembrainStore":
        """A store over ``MembrainMemory(path_or_url)`` (a file path or a database URL).

        Usable directly or, like LangGraph's persistent stores, as a context manager that
        closes the memory on exit::

            with MembrainStore.from_conn_string("memories.db") as store:
                ...
        """
        spec: dict[str, Any] = dict(index or {})
        memory = MembrainMemory(path_or_url, embeddings=_resolve_embeddings(spec.pop("embed", None)))
        store = cls(memory, index=cast(IndexConfig, spec) if spec else None)
        store._owns_memory = True
        return store

    # ----------------------------------------------------------------- batches
    def batch(self, ops: Iterable[Op]) -> list[Result]:
        """Run ``ops`` in order and return one result per op, in the same order."""
        ops = [_normalise(op) for op in ops]
        for op in ops:
            _validate(op)
        return [self._run(op) for op in ops]

    async def abatch(self, ops: Iterable[Op]) -> list[Result]:
        """Async :meth:`batch`: runs in a worker thread, never blocking the event loop."""
        return await asyncio.to_thread(self.batch, list(ops))

    def _run(self, op: Op) -> Result:
        if isinstance(op, GetOp):
            return self._get(op)
        if isinstance(op, SearchOp):
            return self._search(op)
        if isinstance(op, PutOp):
            self._put(op)
            return None
        return self._list_namespaces(op)

    # --------------------------------------------------------------------- ops
    def _get(self, op: GetOp) -> Item | None:
        if not op.namespace:
            return None
        record = self.memory.get(op.key, namespace=op.namespace)
        return _item(record) if record is not None else None

    def _put(self, op: PutOp) -> None:
        if op.value is None:
            if op.namespace:
                self.memory.delete(op.key, namespace=op.namespace)
            return None
        index = op.index if op.index is not None else self.index_fields
        self.memory.put(op.namespace, op.key, dict(op.value), index=index, kind=self._kind_of(op.value))
        return None

    def _search(self, op: SearchOp) -> list[SearchItem]:
        if op.limit == 0:
            return []
        if op.query is not None and not op.query.strip():
            op = op._replace(query=None)  # as in LangGraph, an empty query is no query
        records = self.memory.search(op.query, namespace=tuple(op.namespace_prefix), limit=op.limit,
                                     offset=op.offset, filter=op.filter)
        # LangGraph's limit holds: the statements placed before the hits they supersede come
        # first, and the page is cut after them.
        return [_search_item(r) for r in records[:op.limit]]

    def _list_namespaces(self, op: ListNamespacesOp) -> list[Namespace]:
        prefix = _merge_patterns(op.match_conditions, "prefix")
        suffix = _merge_patterns(op.match_conditions, "suffix")
        if prefix is None or suffix is None:  # two conditions that no namespace can meet
            return []
        # Namespaces holding items: one whose items were all deleted keeps their history
        # (MembrainMemory.history) but holds no item, and is not listed.
        return self.memory.list_namespaces(prefix=prefix or None, suffix=suffix or None,
                                           max_depth=op.max_depth, limit=op.limit, offset=op.offset,
                                           current_only=True)

    def _kind_of(self, value: Any) -> str:
        """The memory kind a value is stored as: its ``"kind"`` when that is "fact" or
        "experience", else the index configuration's ``"kind"`` (default "fact")."""
        kind = value.get("kind")
        return kind if kind in ("fact", "experience") else self.default_kind

    # ------------------------------------------------------------------ extras
    def path(self, namespace: Sequence[str] | str, key: str) -> list[str] | None:
        """Aspect labels from the tree's root down to the item (``[]`` when the item sits
        directly under the root), or None when there is no such item."""
        namespace = _as_tuple(namespace)
        _check_labels(namespace)
        if not namespace:
            return None
        record = self.memory.get(str(key), namespace=namespace)
        return list(record.path) if record is not None else None

    async def apath(self, namespace: Sequence[str] | str, key: str) -> list[str] | None:
        """Async :meth:`path`."""
        return await asyncio.to_thread(self.path, namespace, key)

    def close(self) -> None:
        """Close the memory if this store created it (a given memory is left open)."""
        if self._owns_memory:
            self.memory.close()

    def __enter__(self) -> "MembrainStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(namespaces={len(self.memory.list_namespaces(limit=_NO_LIMIT))})"


# ---------------------------------------------------------------- conversions
def _timestamp(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=timezone.utc)


def _item(record: MemoryRecord) -> Item:
    return Item(value=copy.deepcopy(record.value), key=record.key, namespace=record.namespace,
                created_at=_timestamp(record.created_at), updated_at=_timestamp(record.updated_at))


def _search_item(record: MemoryRecord) -> SearchItem:
    return SearchItem(namespace=record.namespace, key=record.key, value=copy.deepcopy(record.value),
                      created_at=_timestamp(record.created_at), updated_at=_timestamp(record.updated_at),
                      score=float(record.score) if record.score is not None else None)


def _as_tuple(namespace: Any) -> Any:
    """``"a/b"`` -> ``("a", "b")``; lists -> tuples; anything else unchanged (and then
    rejected by validation if it is not a tuple of labels)."""
    if isinstance(namespace, str):
        return tuple(namespace.split("/"))
    if isinstance(namespace, list):
        return tuple(namespace)
    return namespace


def _normalise(op: Op) -> Op:
    """The op with its namespace(s) as tuples and its key as a str."""
    if isinstance(op, (GetOp, PutOp)):
        return op._replace(namespace=_as_tuple(op.namespace), key=str(op.key))
    if isinstance(op, SearchOp):
        return op._replace(namespace_prefix=_as_tuple(op.namespace_prefix))
    if isinstance(op, ListNamespacesOp):
        conditions = tuple(c._replace(path=_as_tuple(c.path)) for c in op.match_conditions or ())
        return op._replace(match_conditions=conditions)
    raise ValueError(f"Unknown operation type: {type(op).__name__}")


# ------------------------------------------------------------------ validation
def _check_labels(namespace: Any) -> None:
    """LangGraph's label rules: non-empty strings without ``.`` or NUL."""
    if not isinstance(namespace, tuple):
        raise InvalidNamespaceError(f"A namespace is a tuple of strings, got {type(namespace).__name__}.")
    for label in namespace:
        if not isinstance(label, str):
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels must be strings, "
                f"got {type(label).__name__}.")
        if not label:
            raise InvalidNamespaceError(f"Namespace labels cannot be empty strings. Got {namespace}.")
        if "." in label or "\x00" in label:
            raise InvalidNamespaceError(
                f"Invalid namespace label {label!r} in {namespace}: labels cannot contain '.' or NUL.")


def _validate(op: Op) -> None:
    """Reject an op before anything runs (as LangGraph's BaseStore methods do, but also for
    ops passed to ``batch`` directly)."""
    if isinstance(op, (GetOp, PutOp)):
        _check_labels(op.namespace)
    elif isinstance(op, SearchOp):
        _check_labels(op.namespace_prefix)
        # As MembrainMemory.search refuses them (limit 0 is an empty page, for both).
        for name in ("limit", "offset"):
            n = getattr(op, name)
            if not isinstance(n, int) or n < 0:
                raise InvalidOperationError(f"limit and offset are non-negative integers, got {name}={n!r}")
    else:
        for condition in op.match_conditions or ():
            _check_labels(condition.path)
    if isinstance(op, PutOp) and op.value is not None:
        if not op.namespace:
            raise InvalidNamespaceError("Namespace cannot be empty.")
        if op.namespace[0] == _RESERVED_ROOT:
            raise InvalidNamespaceError(f'Root label for namespace cannot be "langgraph". Got: {op.namespace}')
    if isinstance(op, PutOp) and op.ttl is not None:
        raise NotImplementedError(
            "TTL is not supported by MembrainStore. Use a store implementation that supports "
            "TTL or set ttl=None.")


def _merge_patterns(conditions: Sequence[MatchCondition] | None, kind: str) -> Namespace | None:
    """Fold every ``kind`` ("prefix"/"suffix") condition into one pattern: ``()`` when there
    is none, None when they contradict each other (no namespace can match them all)."""
    merged: list[str] = []
    for condition in conditions or ():
        if condition.match_type not in ("prefix", "suffix"):
            raise ValueError(f"Unsupported match type: {condition.match_type}")
        if condition.match_type != kind:
            continue
        path = list(condition.path)
        if kind == "suffix":  # align suffixes on their last label
            merged.reverse()
            path.reverse()
        for i, label in enumerate(path):
            if i == len(merged):
                merged.append(label)
            elif merged[i] == "*":
                merged[i] = label
            elif label not in ("*", merged[i]):
                return None
        if kind == "suffix":
            merged.reverse()
    return tuple(merged)


# ----------------------------------------------------------------- embeddings
def _resolve_embeddings(embed: Any) -> Embeddings | None:
    """An ``IndexConfig["embed"]`` as a LangChain Embeddings, without touching the network
    (None stays None: the memory's default embedder)."""
    if embed is None or isinstance(embed, Embeddings):
        return embed
    if isinstance(embed, str):
        if embed.lower() in OFFLINE_EMBEDDERS:
            from ..index.embeddings import MiniLMEmbeddings

            return MiniLMEmbeddings()
        raise ValueError(
            f"cannot resolve the embedder {embed!r} offline; known names: {sorted(OFFLINE_EMBEDDERS)}. "
            "Pass an Embeddings instance instead, e.g. langchain.embeddings.init_embeddings(...).")
    if callable(embed):
        if inspect.iscoroutinefunction(embed):
            return ensure_embeddings(_run_async_embedder(embed))
        return ensure_embeddings(embed)
    raise ValueError(f"index['embed'] must be an Embeddings, a function or a name, got {type(embed).__name__}")


def _run_async_embedder(afunc: Callable[[Sequence[str]], Any]) -> Callable[[Sequence[str]], list[list[float]]]:
    """A sync wrapper of an async embedding function (membrain embeds synchronously); it runs
    the coroutine on a private thread, so it also works when called under a running loop."""

    def embed(texts: Sequence[str]) -> list[list[float]]:
        with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
            return pool.submit(asyncio.run, afunc(list(texts))).result()

    return embed
