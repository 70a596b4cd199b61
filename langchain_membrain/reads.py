"""The read side of a memory: its facts and archived entries as :class:`MemoryRecord`
(``get``, ``history``, ``ignored``), the namespaces it lists, and search across namespaces
(``MembrainMemory.search``).

Each namespace's :class:`~.retrieval.FactIndex` ranks its own facts; this module merges the
namespaces' hits onto one scale, ``retrieval.relevance`` of the fused score, so the same fact
scores the same for the same query however many namespaces are searched.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence, cast

import numpy as np

from .filters import matches
from .forest import Forest
from .inputs import Namespace
from .pipeline import cosine
from .records import MemoryRecord
from .retrieval import Mode, relevance
from .tree import HISTORY_KEY, MembrainTree, Node

Embed = Callable[[list[str]], np.ndarray]


def record_of(ns: Namespace, tree: MembrainTree, key: str, score: float | None = None) -> MemoryRecord:
    """The current fact ``key`` of ``tree`` as a record (call under the namespace's lock)."""
    node = tree.node(key)
    labels = [tree.node(a).text for a in tree.path(key)[1:-1]]
    value = copy.deepcopy(node.metadata.get("value", {}))  # callers never alias stored state
    return MemoryRecord(key, ns, node.text, value, labels, node.created_at, node.updated_at, score,
                        valid_from=tree.valid_from(key))


def archived_record(ns: Namespace, entry: Node, score: float | None = None) -> MemoryRecord:
    """An archived entry (history or ignored) as a record; its key is the entry's id."""
    h = entry.metadata.get(HISTORY_KEY, {})
    if entry.kind == "ignored":
        status = "ignored"
    else:
        status = "superseded" if h.get("operation") == "update" else "deleted"
    value = copy.deepcopy(entry.metadata.get("value", {}))
    return MemoryRecord(entry.id, ns, entry.text, value, list(h.get("path", [])), entry.created_at,
                        entry.updated_at, score, status, h.get("valid_from", entry.created_at),
                        h.get("valid_to"), h.get("superseded_by"))


def select_namespaces(found: list[Namespace], *, prefix: Sequence[str] | None, suffix: Sequence[str] | None,
                      max_depth: int | None) -> list[Namespace]:
    """``found`` whose first labels match ``prefix`` and last ones ``suffix`` (``"*"``: any
    label), truncated to ``max_depth`` labels (deduplicated), sorted."""

    def fits(ns: Namespace, pattern: Sequence[str] | None, at_end: bool) -> bool:
        if not pattern:
            return True
        pattern = tuple(pattern)
        if len(pattern) > len(ns):
            return False
        part = ns[-len(pattern):] if at_end else ns[: len(pattern)]
        return all(p == "*" or p == n for p, n in zip(pattern, part))

    found = [ns for ns in found if fits(ns, prefix, False) and fits(ns, suffix, True)]
    if max_depth is not None:
        found = list({ns[:max_depth] for ns in found})
    found.sort()
    return found


def holds_facts(forest: Forest, ns: Namespace) -> bool:
    """Whether the (in-process) namespace holds a current fact, not only history."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        return tree is not None and tree.fact_count(tree.root_id) > 0


def trees(forest: Forest, names: Sequence[Namespace]) -> list[MembrainTree]:
    """The trees of ``names`` still there (each read under its lock), for their stats."""
    out = []
    for ns in names:
        with forest.lock(ns):
            tree = forest.tree(ns, create=False)
            if tree is not None:
                out.append(tree)
    return out


def get(forest: Forest, ns: Namespace, key: str) -> MemoryRecord | None:
    """The current fact ``key`` of ``ns`` as a record, or None."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None or key not in tree or tree.node(key).kind != "fact":
            return None
        return record_of(ns, tree, key)


def history(forest: Forest, ns: Namespace, key: str) -> list[MemoryRecord]:
    """Every version of ``key`` (or of the memory an archived entry's id names), oldest first."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None:
            return []
        entry = tree.archive.get(key)
        if entry is not None:
            key = entry.metadata.get(HISTORY_KEY, {}).get("key", key)
        out = [archived_record(ns, e) for e in tree.history(key)]
        if key in tree and tree.node(key).kind == "fact":
            out.append(record_of(ns, tree, key))
        return out


def ignored(forest: Forest, ns: Namespace, limit: int) -> list[MemoryRecord]:
    """The namespace's log of ignored items, newest first."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None:
            return []
        return [archived_record(ns, e) for e in tree.archived("ignored")[::-1][:limit]]


def rank(forest: Forest, ns: Namespace, tree: MembrainTree, query: str | None, filter: dict[str, Any] | None,
         k: int, embedded: dict[str, np.ndarray], *, embed: Embed, mode: str) -> list[tuple[str, float | None]]:
    """(key, score) of up to ``k`` best facts of one namespace matching ``filter``, then
    its matching unembedded facts (score None). Without a query: every matching fact.
    ``embedded`` caches the dense query texts' embeddings across namespaces.

    With a query and no filter nothing here walks the tree's facts, so the cost is the
    index's (sub-linear in fast mode)."""
    def passes(f: str) -> bool:
        return not filter or matches(tree.node(f).metadata.get("value", {}), filter)

    facts = [f for f in tree.facts() if passes(f)] if filter or query is None else None
    if query is None:
        assert facts is not None
        return [(f, None) for f in facts]
    index = forest.index(ns)
    scored: list[tuple[str, float | None]] = []
    if index is not None and len(index):
        dense_text = index.dense_query_text(query)
        if dense_text not in embedded:
            embedded[dense_text] = embed([dense_text])[0]
        scored = [(cast(str, f), float(s)) for f, s in index.search(
            query, embedded[dense_text], k, tree=tree, mode=cast(Mode, mode), filter_ids=facts)]
    unscored: list[tuple[str, float | None]] = [(f, None) for f in sorted(forest.unindexed(ns)) if passes(f)]
    return scored + unscored


def search(forest: Forest, spaces: Sequence[Namespace], query: str | None, *, filter: dict[str, Any] | None,
           limit: int, offset: int, include_history: bool, embed: Embed, mode: str) -> list[MemoryRecord]:
    """The hits of ``spaces`` (validated arguments: see ``MembrainMemory.search``), best first
    for a query, newest first without one."""
    embedded: dict[str, np.ndarray] = {}  # one embedding per distinct dense query text
    hits: list[MemoryRecord] = []
    vectors: dict[tuple[Namespace, str], Any] = {}  # embeddings, for cosines (history, merge ties)
    for ns in spaces:
        with forest.lock(ns):
            tree = forest.tree(ns, create=False)
            if tree is None:
                continue
            for key, score in rank(forest, ns, tree, query, filter, offset + limit, embedded, embed=embed, mode=mode):
                hits.append(record_of(ns, tree, key, score))
                if score is not None:
                    vectors[ns, key] = tree.node(key).embedding
            if include_history:
                for entry in tree.archived("history"):
                    if filter and not matches(entry.metadata.get("value", {}), filter):
                        continue
                    scored = query is not None and entry.embedding is not None
                    hits.append(archived_record(ns, entry, 0.0 if scored else None))
                    if scored:
                        vectors[ns, entry.id] = entry.embedding
    if query is None:
        hits.sort(key=lambda r: (-r.updated_at, r.key))
        return hits[offset: offset + limit]
    return _merged(hits, vectors, embedded, query, include_history, embed)[offset: offset + limit]


def _merged(hits: list[MemoryRecord], vectors: dict[tuple[Namespace, str], Any],
            embedded: dict[str, np.ndarray], query: str, include_history: bool, embed: Embed) -> list[MemoryRecord]:
    """The hits of a query, best first, each ``score`` set on its reported scale.

    The plain cosine with the query ranks current and archived versions together
    (include_history), and breaks exact ties between namespaces (each namespace's only
    fact holding a query word scores the same: BM25 over its namespace's best)."""
    merging = len({h.namespace for h in hits if h.score is not None}) > 1
    q = None
    if vectors and (include_history or merging):
        q = next(iter(embedded.values())) if len(embedded) == 1 else embed([query])[0]
    ranked: list[tuple[tuple, MemoryRecord]] = []  # (what ranks it, the hit)
    for h in hits:
        rank_by = h.score
        tie = 0.0
        if rank_by is not None:
            if include_history:  # on one scale: the cosine, clipped to [0, 1]
                assert q is not None  # a scored hit has a vector, so q was embedded
                rank_by = cosine(vectors[h.namespace, h.key], q)
                h.score = min(max(rank_by, 0.0), 1.0)
            else:  # one scale for every namespace and entry point (retrieval.relevance)
                tie = cosine(vectors[h.namespace, h.key], q) if merging and q is not None else 0.0
                h.score = relevance(rank_by)
        # Ranked by what the score is a monotone function of (ties in the reported score
        # never reorder hits); as LangGraph's stores do, items stored without an embedding
        # come last, unscored.
        ranked.append(((rank_by is None, -(rank_by or 0.0), -tie, -h.updated_at), h))
    ranked.sort(key=lambda p: p[0])
    return [h for _, h in ranked]
