"""`MembrainMemory`: the one-line entry point.

A memory is a forest: one :class:`~.tree.MembrainTree` per namespace (a tuple of strings;
``"a/b"`` is accepted for ``("a", "b")``). Each fact node's id is its key, its text is the
text that was embedded, and its metadata holds

- ``"value"``: the value as the caller stored it (a dict; ``add(text)`` stores
  ``{"content": text, **metadata}``),
- ``"indexed"``: False for values stored without an embedding (not placed by the models).

Every public method is a thin wrapper over a handful of private operations that take the
namespace's lock, so many threads can add and search at once.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
from langchain_core.embeddings import Embeddings
from langgraph.store.base import get_text_at_path, tokenize_path

from .embeddings import MiniLMEmbeddings, embed_texts
from .errors import InvalidOperationError, MembrainError
from .filters import check_filter, matches
from .pipeline import cosine
from .storage import Storage, open_storage
from .teachers.base import NewFact
from .tree import MembrainTree

Namespace = tuple[str, ...]
DEFAULT_NAMESPACE: Namespace = ("memories",)
MAX_TEXT_CHARS = 100_000


class NamespaceError(MembrainError):
    """A namespace that is not a non-empty tuple of non-empty strings without dots' misuse."""


def as_namespace(namespace: str | Sequence[str] | None) -> Namespace:
    """Normalise ``"a/b"``, ``["a", "b"]`` or ``("a", "b")`` to ``("a", "b")``."""
    if namespace is None:
        return DEFAULT_NAMESPACE
    if isinstance(namespace, str):
        parts = tuple(p for p in namespace.split("/"))
    elif isinstance(namespace, (tuple, list)):
        parts = tuple(namespace)
    else:
        raise NamespaceError(f"a namespace is a str or a tuple of str, got {type(namespace).__name__}")
    if not parts or any(not isinstance(p, str) or not p for p in parts):
        raise NamespaceError(f"invalid namespace {namespace!r}: labels must be non-empty strings")
    return parts


def check_text(text: Any) -> str:
    if not isinstance(text, str):
        raise InvalidOperationError(f"memory text must be a str, got {type(text).__name__}")
    if not text.strip():
        raise InvalidOperationError("memory text is empty")
    if "\x00" in text:
        raise InvalidOperationError("memory text may not contain NUL characters")
    if len(text) > MAX_TEXT_CHARS:
        raise InvalidOperationError(f"memory text has {len(text)} characters; the limit is {MAX_TEXT_CHARS}")
    return text


def _json_copy(value: Any) -> Any:
    """A deep copy through JSON: rejects what could not be persisted."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidOperationError(f"values must be JSON-serialisable: {exc}") from None


@dataclass
class MemoryRecord:
    """A stored memory, as search and get return it."""

    key: str
    namespace: Namespace
    text: str
    value: dict[str, Any]
    path: list[str]
    created_at: float
    updated_at: float
    score: float | None = None


@dataclass
class _Forest:
    trees: dict[Namespace, MembrainTree] = field(default_factory=dict)
    locks: dict[Namespace, threading.RLock] = field(default_factory=dict)
    guard: threading.Lock = field(default_factory=threading.Lock)

    def lock(self, ns: Namespace) -> threading.RLock:
        with self.guard:
            return self.locks.setdefault(ns, threading.RLock())


class MembrainMemory:
    """Long-term memory as a forest of trees, one per namespace.

    ``MembrainMemory()`` works offline with no arguments: the bundled MiniLM embedder, the
    heuristic teacher, everything in memory.
    """

    def __init__(self, storage: str | os.PathLike[str] | Storage | None = None, *, teacher: Any = None,
                 embeddings: Embeddings | None = None, index_fields: Sequence[str] | None = None,
                 refresh_interval: float = 1.0):
        self.embeddings = embeddings if embeddings is not None else MiniLMEmbeddings()
        self.index_fields = list(index_fields) if index_fields else ["content", "text"]
        self.teacher = teacher
        self.refresh_interval = float(refresh_interval)
        self._forest = _Forest()
        self._storage: Storage | None = (
            storage if isinstance(storage, Storage) or storage is None else open_storage(storage)
        )
        self._synced: dict[Namespace, int] = {}  # namespace -> stored version our tree reflects
        self._checked: dict[Namespace, float] = {}  # namespace -> monotonic time of last check
        self._closed = False

    # ------------------------------------------------------------- namespaces
    def _load(self, ns: Namespace) -> MembrainTree | None:
        """(Re)load a namespace from storage into the forest; None if it is not stored."""
        loaded = self._storage.load_tree(ns)
        self._checked[ns] = time.monotonic()
        if loaded is None:
            self._forest.trees.pop(ns, None)
            self._synced.pop(ns, None)
            return None
        tree, version = loaded
        self._forest.trees[ns], self._synced[ns] = tree, version
        return tree

    def _tree(self, ns: Namespace, *, create: bool) -> MembrainTree | None:
        """The namespace's tree for reading: refreshed from storage when another process
        wrote it (checked at most once per ``refresh_interval``). Call under its lock."""
        tree = self._forest.trees.get(ns)
        if self._storage is not None:
            due = time.monotonic() - self._checked.get(ns, float("-inf")) >= self.refresh_interval
            if tree is None or due:
                self._checked[ns] = time.monotonic()
                if self._storage.namespace_version(ns) != self._synced.get(ns, 0):
                    tree = self._load(ns)
        if tree is None and create:
            tree = self._forest.trees[ns] = MembrainTree("/".join(ns))
        return tree

    def _mutate(self, ns: Namespace, write: Callable[[MembrainTree], Any]) -> Any:
        """Run ``write`` on the namespace's tree and persist what it changed, atomically.

        With storage, the namespace's cross-process lock is held throughout: the tree is
        reloaded first if another process wrote it, and the changes are committed in one
        transaction. If anything fails, the in-memory tree is dropped (it is reloaded from
        storage on next use), so memory never runs ahead of what is stored.
        """
        with self._forest.lock(ns):
            if self._storage is None:
                tree = self._tree(ns, create=True)
                result = write(tree)
                tree.drain_changes()  # nothing to persist; keep the journal empty
                if tree.fact_count(tree.root_id) == 0 and not tree.aspects():
                    self._forest.trees.pop(ns, None)
                return result
            try:
                with self._storage.namespace_lock(ns):
                    stored = self._storage.namespace_version(ns)
                    tree = self._forest.trees.get(ns)
                    if tree is None or stored != self._synced.get(ns, 0):
                        tree = self._load(ns) if stored else None
                    if tree is None:
                        tree = self._forest.trees[ns] = MembrainTree("/".join(ns))
                    result = write(tree)
                    rows, removed = tree.drain_changes()
                    if tree.fact_count(tree.root_id) == 0 and not tree.aspects():
                        self._storage.delete_namespace(ns)  # an emptied namespace is not listed
                        self._forest.trees.pop(ns, None)
                        self._synced.pop(ns, None)
                    elif rows or removed:
                        self._synced[ns] = self._storage.write(ns, rows, removed, expected_version=stored)
                    self._checked[ns] = time.monotonic()
                return result
            except BaseException:
                self._forest.trees.pop(ns, None)
                self._synced.pop(ns, None)
                raise

    def namespaces(self) -> list[Namespace]:
        """Every namespace that holds memories."""
        return self.list_namespaces(limit=sys.maxsize)

    def tree(self, namespace: str | Sequence[str] | None = None) -> MembrainTree:
        """The live tree of a namespace (read it under no concurrent writes, or copy it)."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._tree(ns, create=False)
        if tree is None:
            raise InvalidOperationError(f"no memories in namespace {ns!r}")
        return tree

    def list_namespaces(self, *, prefix: Sequence[str] | None = None, suffix: Sequence[str] | None = None,
                        max_depth: int | None = None, limit: int = 100, offset: int = 0) -> list[Namespace]:
        """Namespaces holding memories, sorted; ``prefix``/``suffix`` may use ``"*"`` as a
        wildcard label; ``max_depth`` truncates longer namespaces (deduplicated)."""

        def fits(ns: Namespace, pattern: Sequence[str] | None, at_end: bool) -> bool:
            if not pattern:
                return True
            pattern = tuple(pattern)
            if len(pattern) > len(ns):
                return False
            part = ns[-len(pattern):] if at_end else ns[: len(pattern)]
            return all(p == "*" or p == n for p, n in zip(pattern, part))

        if self._storage is not None:
            found = self._storage.list_namespaces()
        else:
            found = [ns for ns, t in list(self._forest.trees.items()) if t.fact_count(t.root_id) > 0]
        found = [ns for ns in found if fits(ns, prefix, False) and fits(ns, suffix, True)]
        if max_depth is not None:
            found = list({ns[:max_depth] for ns in found})
        found.sort()
        return found[offset: offset + limit]

    # ----------------------------------------------------------------- writes
    def _embed(self, texts: list[str]) -> np.ndarray:
        return embed_texts(self.embeddings, texts)

    def add(self, text: str, *, namespace: str | Sequence[str] | None = None,
            metadata: dict[str, Any] | None = None, key: str | None = None) -> str:
        """Store one memory and return its key."""
        return self.add_many([text], namespace=namespace, metadatas=[metadata], keys=[key])[0]

    def add_many(self, texts: Sequence[str], *, namespace: str | Sequence[str] | None = None,
                 metadatas: Sequence[dict[str, Any] | None] | None = None,
                 keys: Sequence[str | None] | None = None) -> list[str]:
        """Store many memories (embedded in one batch) and return their keys.

        Each memory's value is ``{"content": text, **metadata}``."""
        ns = as_namespace(namespace)
        texts = [check_text(t) for t in texts]
        metadatas = list(metadatas) if metadatas is not None else [None] * len(texts)
        keys = list(keys) if keys is not None else [None] * len(texts)
        if not (len(metadatas) == len(keys) == len(texts)):
            raise InvalidOperationError("texts, metadatas and keys must have the same length")
        values = []
        for meta in metadatas:
            if meta is not None and not isinstance(meta, dict):
                raise InvalidOperationError("metadata must be a dict")
            if meta and "content" in meta:
                raise InvalidOperationError("metadata may not use the key 'content' (it holds the text)")
            values.append(_json_copy(meta or {}))
        vecs = self._embed(texts)
        return [self._write(ns, key or uuid.uuid4().hex, {"content": text, **value}, text, vec)
                for text, value, vec, key in zip(texts, values, vecs, keys)]

    def put(self, namespace: str | Sequence[str], key: str, value: dict[str, Any], *,
            index: bool | Sequence[str] | None = None) -> None:
        """Insert or replace the value under ``key`` (LangGraph store semantics).

        The embedded text comes from ``index`` (a list of value fields), else the memory's
        ``index_fields``: by default ``content``, then ``text``, else the value's JSON.
        ``index=False`` stores the value without embedding it (not placed, not found by a
        query). When the text of an existing key changes, the fact is placed again.
        """
        ns = as_namespace(namespace)
        if not isinstance(key, str) or not key:
            raise InvalidOperationError("a key is a non-empty str")
        if not isinstance(value, dict):
            raise InvalidOperationError(f"a value is a dict, got {type(value).__name__}")
        value = _json_copy(value)
        if index is False:
            self._write(ns, key, value, None, None)
            return
        text = check_text(self.text_of(value, None if index in (None, True) else list(index)))
        self._write(ns, key, value, text, self._embed([text])[0])

    def text_of(self, value: dict[str, Any], fields: list[str] | None = None) -> str:
        """The text embedded for ``value``: the first present of ``fields`` (default
        ``content``, then ``text``), else the value's JSON; several fields are joined."""
        explicit = fields is not None
        found: list[str] = []
        for path in fields or self.index_fields:
            found += [t for t in get_text_at_path(value, tokenize_path(path)) if t]
            if found and not explicit:
                break  # defaults are alternatives: the first present field wins
        if found:
            return "\n".join(found)
        return json.dumps(value, sort_keys=True, ensure_ascii=False)

    def _write(self, ns: Namespace, key: str, value: dict[str, Any], text: str | None,
               vec: np.ndarray | None) -> str:
        """Insert or update one fact (one transaction with storage)."""
        meta = {"value": value, "indexed": vec is not None}

        def write(tree: MembrainTree) -> str:
            if key in tree:
                node = tree.node(key)
                if node.kind != "fact":
                    raise InvalidOperationError(f"key {key!r} is used by an aspect")
                if vec is None or (node.text == text and node.embedding is not None):
                    tree.update_fact(key, text=text if text is not None else node.text,
                                     embedding=vec, metadata=meta)
                    return key
                created = node.created_at  # the text changed: place the fact again
                tree.remove(key)
                self._place(tree, NewFact(text, vec, meta), key, created_at=created)
            elif vec is None:
                tree.add_fact(tree.root_id, "", node_id=key, metadata=meta)
            else:
                self._place(tree, NewFact(text, vec, meta), key)
            return key

        return self._mutate(ns, write)

    def _place(self, tree: MembrainTree, new_fact: NewFact, key: str, *, created_at: float | None = None) -> None:
        tree.add_fact(tree.root_id, new_fact.text, embedding=new_fact.embedding, node_id=key,
                      metadata=new_fact.metadata, created_at=created_at)

    def delete(self, key: str, *, namespace: str | Sequence[str] | None = None) -> bool:
        """Delete a memory; returns False if there was none."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._tree(ns, create=False)
            if tree is None or key not in tree or tree.node(key).kind != "fact":
                return False

        def write(tree: MembrainTree) -> bool:
            if key not in tree or tree.node(key).kind != "fact":
                return False
            tree.remove(key)
            return True

        return self._mutate(ns, write)

    # ------------------------------------------------------------------ reads
    def _record(self, ns: Namespace, tree: MembrainTree, key: str, score: float | None = None) -> MemoryRecord:
        node = tree.node(key)
        labels = [tree.node(a).text for a in tree.path(key)[1:-1]]
        value = copy.deepcopy(node.metadata.get("value", {}))  # callers never alias stored state
        return MemoryRecord(key, ns, node.text, value, labels, node.created_at, node.updated_at, score)

    def get(self, key: str, *, namespace: str | Sequence[str] | None = None) -> MemoryRecord | None:
        """The memory stored under ``key``, or None."""
        ns = as_namespace(namespace)
        with self._forest.lock(ns):
            tree = self._tree(ns, create=False)
            if tree is None or key not in tree or tree.node(key).kind != "fact":
                return None
            return self._record(ns, tree, key)

    def path(self, key: str, *, namespace: str | Sequence[str] | None = None) -> list[str]:
        """Labels of the aspects from the root down to the memory (empty if under the root)."""
        record = self.get(key, namespace=namespace)
        if record is None:
            raise InvalidOperationError(f"no memory {key!r} in {as_namespace(namespace)!r}")
        return record.path

    def search(self, query: str | None = None, *, namespace: str | Sequence[str] | None = None,
               limit: int = 5, offset: int = 0, filter: dict[str, Any] | None = None,
               exact_namespace: bool = False) -> list[MemoryRecord]:
        """Memories in ``namespace`` and every namespace below it (unless
        ``exact_namespace``), matching ``filter``: best first for a query, newest first
        without one."""
        prefix = () if namespace == () else as_namespace(namespace)  # () spans the whole store
        check_filter(filter)
        if not isinstance(limit, int) or not isinstance(offset, int) or limit < 0 or offset < 0:
            raise InvalidOperationError("limit and offset are non-negative integers")
        spaces = [ns for ns in self.namespaces()
                  if ns == prefix or (not exact_namespace and ns[: len(prefix)] == prefix)]
        q = self._embed([check_text(query)])[0] if query is not None else None
        hits: list[MemoryRecord] = []
        for ns in spaces:
            with self._forest.lock(ns):
                tree = self._tree(ns, create=False)
                if tree is None:
                    continue
                for key, score in self._rank(ns, tree, q, query, filter):
                    hits.append(self._record(ns, tree, key, score))
        if q is None:
            hits.sort(key=lambda r: (-r.updated_at, r.key))
        else:
            # As LangGraph's stores do, items stored without an embedding come last, unscored.
            hits.sort(key=lambda r: (r.score is None, -(r.score or 0.0), -r.updated_at))
        return hits[offset: offset + limit]

    def _rank(self, ns: Namespace, tree: MembrainTree, q: np.ndarray | None, query: str | None,
              filter: dict[str, Any] | None) -> list[tuple[str, float | None]]:
        """(key, score) of the facts of one tree that match ``filter``."""
        out = []
        for f in tree.facts():
            node = tree.node(f)
            if not matches(node.metadata.get("value", {}), filter):
                continue
            if q is None or node.embedding is None:
                out.append((f, None))
            else:
                out.append((f, cosine(node.embedding, q)))
        return out

    def stats(self) -> dict[str, Any]:
        trees = self._forest.trees
        return {
            "namespaces": len(trees),
            "facts": sum(len(t.facts()) for t in trees.values()),
            "aspects": sum(len(t.aspects()) for t in trees.values()),
        }

    # -------------------------------------------------------------- lifecycle
    def flush(self) -> None:
        """Wait until background training has caught up."""

    def close(self) -> None:
        """Wait for background work, then release the storage (idempotent)."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        if self._storage is not None:
            self._storage.close()

    def __enter__(self) -> "MembrainMemory":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
