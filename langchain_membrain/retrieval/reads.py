"""The read side of a memory: its facts and archived entries as :class:`MemoryRecord`
(``get``, ``history``, ``ignored``), the namespaces it lists, and search across namespaces
(``MembrainMemory.search``).

Each namespace's :class:`~.retrieval.FactIndex` ranks its own facts; this module merges the
namespaces' hits onto one scale, the calibrated relevance of scores.py, so the same fact
scores the same for the same query however many namespaces are searched.
"""

from __future__ import annotations

import copy
import re
from dataclasses import replace
from typing import Any, Callable, Sequence, cast

import numpy as np

from ..index.facts import Mode
from ..storage.forest import Forest
from ..tree.archive import HISTORY_KEY, working_id
from ..tree.filters import matches
from ..tree.inputs import Namespace
from ..tree.kinds import KIND_KEY, SEARCHED_KINDS, SOURCES_KEY, MemoryKind
from ..tree.nodes import Node
from ..tree.placement import cosine
from ..tree.records import MemoryRecord
from ..tree.tree import MembrainTree, stated_valid_time
from .scores import calibrated, non_increasing
from .supersession import place, superseder

Embed = Callable[[list[str]], np.ndarray]


def record_of(ns: Namespace, tree: MembrainTree, key: str, score: float | None = None) -> MemoryRecord:
    """The current fact ``key`` of ``tree`` (or its raw item or working entry ``key``) as a
    record (call under the namespace's lock)."""
    if key not in tree:
        return beside_record(ns, tree.archive[key], score)
    node = tree.node(key)
    labels = [tree.node(a).text for a in tree.path(key)[1:-1]]
    value = copy.deepcopy(node.metadata.get("value", {}))  # callers never alias stored state
    valid_from, valid_to = stated_valid_time(node)
    return MemoryRecord(key, ns, node.text, value, labels, node.created_at, node.updated_at, score,
                        valid_from=node.created_at if valid_from is None else valid_from, valid_to=valid_to,
                        kind=node.metadata.get(KIND_KEY, "fact"), sources=list(node.metadata.get(SOURCES_KEY, ())))


def beside_record(ns: Namespace, entry: Node, score: float | None = None) -> MemoryRecord:
    """A raw item or a working entry as a record (its kind is the entry's)."""
    value = copy.deepcopy(entry.metadata.get("value", {}))
    return MemoryRecord(entry.id, ns, entry.text, value, [], entry.created_at, entry.updated_at, score,
                        valid_from=entry.created_at, kind=entry.kind)


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


def named_subjects(spaces: Sequence[Namespace], depth: int, query: str | None) -> list[Namespace]:
    """The namespaces of ``spaces`` that ``query`` names: one of their labels below the
    searched prefix (``depth`` labels long) is a word of the query, compared case-folded
    ("what does Maya eat?" names ``("users", "maya")`` under ``("users",)``). [] when the
    query names none, or names them all: then it picks no subject out."""
    if query is None or len(spaces) < 2:
        return []
    words = set(re.findall(r"[\w'-]+", query.casefold().replace("’", "'")))
    words |= {w.removesuffix("'s") for w in words}
    named = [ns for ns in spaces if any(label.casefold() in words for label in ns[depth:])]
    return named if len(named) < len(spaces) else []


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
    """The current fact or experience ``key`` of ``ns``, its raw item ``key``, or the
    current working memory ``key`` of a session, as a record; None if there is none."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None:
            return None
        entry = tree.archive.get(key)
        current_working = entry is not None and entry.kind == "working" and key == working_id(
            str(entry.metadata.get("session", "")))
        if entry is not None and (entry.kind == "raw" or current_working):
            return beside_record(ns, entry)
        if key not in tree or tree.node(key).kind != "fact":
            return None
        return record_of(ns, tree, key)


def working(forest: Forest, ns: Namespace, session: str, *, history: bool = False) -> list[MemoryRecord]:
    """The working memory of ``session`` in ``ns`` that a teacher wrote: the current one
    ([] if none), or with ``history`` every version, oldest first."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None:
            return []
        if history:
            return [beside_record(ns, e) for e in tree.working_history(session)]
        found = tree.working(session)
        return [] if found is None else [beside_record(ns, found)]


def working_memories(forest: Forest, ns: Namespace) -> list[MemoryRecord]:
    """The current working memory of each session of ``ns`` that a teacher wrote."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None:
            return []
        return [beside_record(ns, e) for e in tree.current_working()]


def session_texts(forest: Forest, ns: Namespace, session: str) -> list[str]:
    """The texts of ``ns``'s current facts and raw items of ``session`` (their value's
    ``session``, compared as text), in the order they came."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        if tree is None:
            return []
        nodes = [tree.node(f) for f in tree.facts()] + tree.archived("raw")
        mine = [n for n in nodes if str(n.metadata.get("value", {}).get("session", "")) == session
                and not n.metadata.get(SOURCES_KEY)]  # a formed fact's words are its raw item's
        return [n.text for n in sorted(mine, key=lambda n: (n.created_at, n.seq))]


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


def entry_of(tree: MembrainTree, key: str) -> Node:
    """A current fact's node, or the entry beside the tree (raw item, working) ``key``."""
    return tree.node(key) if key in tree else tree.archive[key]


def kind_of(tree: MembrainTree, key: str) -> str:
    """The memory kind of a current fact or an entry beside the tree."""
    if key in tree:
        return str(tree.node(key).metadata.get(KIND_KEY, "fact"))
    return tree.archive[key].kind


def origin_of(tree: MembrainTree, key: str) -> str:
    """The input a hit stands for: a formed fact's first source (its raw item), else the hit
    itself."""
    if key in tree:
        sources = tree.node(key).metadata.get(SOURCES_KEY)
        if sources:
            return str(sources[0])
    return key


def rank(forest: Forest, ns: Namespace, tree: MembrainTree, query: str | None, filter: dict[str, Any] | None,
         k: int, embedded: dict[str, np.ndarray], *, embed: Embed, mode: str,
         kinds: Sequence[MemoryKind] = SEARCHED_KINDS) -> list[tuple[str, float | None]]:
    """(key, score) of up to ``k`` best items of one namespace of ``kinds`` matching
    ``filter``, then its matching unembedded facts (score None). Without a query: every
    matching item, newest first. ``embedded`` caches the dense query texts' embeddings
    across namespaces.

    Where raw items are searched, an input and what was formed from it are one slot
    (:func:`origin_of`), ranked by the best of them; the slot shows the best ranked formed
    memory among them (the distilled, dated statement, whose ``sources`` name the input),
    the raw item only where none of its formed memories is a candidate. Where they are not,
    every formed memory is a slot of its own: ``kinds`` returns what it names.

    With a query, no filter and every searched kind, nothing here walks the tree's facts, so
    the cost is the index's (sub-linear in fast mode)."""
    passes = _passes(tree, filter)

    every_kind = set(SEARCHED_KINDS) <= set(kinds)
    ids = None
    if filter or query is None or not every_kind:
        ids = [f for f in tree.facts() if kind_of(tree, f) in kinds]
        ids += [e.id for e in tree.archived("raw")] if "raw" in kinds else []
        ids = [f for f in ids if passes(f)]
    if query is None:
        assert ids is not None
        return [(f, None) for f in ids]
    index = forest.index(ns)
    scored: list[tuple[str, float | None]] = []
    if index is not None and len(index):
        slots: dict[str, list[tuple[str, float]]] = {}  # origin -> its candidates, best first
        formed = forest.formed(ns) if "raw" in kinds else []
        for f, s in _ranked(index, tree, query, ids, k, embedded, formed, embed=embed, mode=cast(Mode, mode)):
            origin = origin_of(tree, f) if "raw" in kinds else f
            if origin in slots:
                slots[origin].append((f, s))
            elif len(slots) < k:
                slots[origin] = [(f, s)]
        for members in slots.values():
            shown = next((f for f, _ in members if kind_of(tree, f) != "raw"), members[0][0])
            scored.append((shown, members[0][1]))
    unscored: list[tuple[str, float | None]] = [(f, None) for f in sorted(forest.unindexed(ns)) if passes(f)
                                               and kind_of(tree, f) in kinds]
    return scored + unscored


def _passes(tree: MembrainTree, filter: dict[str, Any] | None) -> Callable[[str], bool]:
    """Whether an item of ``tree`` matches ``filter`` (its value's fields)."""
    return lambda f: not filter or matches(entry_of(tree, f).metadata.get("value", {}), filter)


def _ranked(index: Any, tree: MembrainTree, query: str, ids: list[str] | None, k: int,
            embedded: dict[str, np.ndarray], formed: list[str], *, embed: Embed, mode: Mode) -> list[tuple[str, float]]:
    """The namespace's index's ranking of ``query``, best first, with the steps that memory
    kinds add (RetrievalConfig): a second step with the best of the ``formed`` facts' text
    (facts formed from raw items, when raw items are searched), and the sessions' prior from
    their working memories."""
    cfg = index.config

    def vector(text: str) -> np.ndarray:
        dense_text = index.dense_query_text(text)
        if dense_text not in embedded:
            embedded[dense_text] = embed([dense_text])[0]
        return embedded[dense_text]

    # A fact and its raw items take one slot: room for the folded ones.
    wanted = 2 * k if formed else k
    if cfg.session_prior:  # a prior that reorders only the top k would change no recall@k
        wanted = 5 * k
    first = index.search(query, vector(query), wanted, tree=tree, mode=mode, filter_ids=ids)
    score: dict[str, float] = {cast(str, f): float(s) for f, s in first}
    if cfg.second_step and formed:
        best = index.search(query, vector(query), cfg.second_step, tree=tree, mode=mode, filter_ids=formed)
        if best:
            # The second query's embedding is the query's moved toward the facts' (Rocchio's
            # relevance feedback), so the second step embeds nothing.
            nodes = [tree.node(cast(str, f)) for f, _ in best]
            again = " ".join([query, *(n.text for n in nodes)])
            moved = vector(query) + np.mean([n.embedding for n in nodes if n.embedding is not None], axis=0)
            moved = (moved / max(float(np.linalg.norm(moved)), 1e-12)).astype(np.float32)
            for f, s in index.search(again, moved, wanted, tree=tree, mode=mode, filter_ids=ids):
                score[cast(str, f)] = score.get(cast(str, f), 0.0) + cfg.second_step_weight * float(s)
    if cfg.session_prior:
        prior = _session_prior(tree, vector(query))
        if prior:
            for f in score:
                node = tree.node(f) if f in tree else tree.archive[f]
                score[f] += cfg.session_prior * prior.get(str(node.metadata.get("value", {}).get("session", "")), 0.0)
    return sorted(score.items(), key=lambda p: -p[1])


def _session_prior(tree: MembrainTree, qvec: np.ndarray) -> dict[str, float]:
    """Session -> the z-scored cosine of the query with its working memory (over the
    sessions that have one embedded); {} for fewer than two."""
    current = [e for e in tree.current_working() if e.embedding is not None]
    if len(current) < 2:
        return {}
    cos = np.array([cosine(e.embedding, qvec) for e in current])
    std = float(cos.std())
    if std <= 1e-12:
        return {}
    return {str(e.metadata.get("session", "")): float((c - cos.mean()) / std) for e, c in zip(current, cos)}


def search(forest: Forest, spaces: Sequence[Namespace], query: str | None, *, filter: dict[str, Any] | None,
           limit: int, offset: int, include_history: bool, embed: Embed, mode: str,
           kinds: Sequence[MemoryKind] = SEARCHED_KINDS) -> list[MemoryRecord]:
    """The hits of ``spaces`` (validated arguments: see ``MembrainMemory.search``), best first
    for a query, newest first without one; with a query and without history, the current
    facts that supersede a hit are placed just before it (supersession.py)."""
    embedded: dict[str, np.ndarray] = {}  # one embedding per distinct dense query text
    hits: list[MemoryRecord] = []
    vectors: dict[tuple[Namespace, str], Any] = {}  # embeddings, for cosines (history, merge ties)
    probs: dict[tuple[Namespace, str], tuple[float, int]] = {}  # calibrated score, rank in its namespace
    newer: dict[tuple, tuple[MemoryRecord, bool]] = {}  # (namespace, key) -> a newer current fact before it
    for ns in spaces:
        with forest.lock(ns):
            tree = forest.tree(ns, create=False)
            if tree is None:
                continue
            ranked = rank(forest, ns, tree, query, filter, offset + limit, embedded, embed=embed, mode=mode,
                          kinds=kinds)
            found_hits = [(key, score, entry_of(tree, key)) for key, score in ranked if score is not None]
            if found_hits and query is not None:
                index = forest.index(ns)
                assert index is not None  # scored hits come from the index
                qvec = embedded.get(index.dense_query_text(query))
                found = non_increasing(calibrated(query, qvec, [(k, s, *_versions(index, tree, k, e, "raw" in kinds)) for k, s, e in found_hits],
                                                  len(index)))
                probs.update({(ns, k): (p, i) for i, ((k, _, _), p) in enumerate(zip(found_hits, found))})
            for key, score in ranked:
                hits.append(record_of(ns, tree, key, score))
                if score is not None:
                    vectors[ns, key] = entry_of(tree, key).embedding
            if query is not None and not include_history:
                index = forest.index(ns)
                qvec = None if index is None else embedded.get(index.dense_query_text(query))
                newer.update(_superseders(forest, ns, tree, [k for k, s in ranked if s is not None], filter, kinds,
                                          qvec))
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
    page = _merged(hits, vectors, probs, embedded, query, include_history, embed)[offset: offset + limit]
    return page if include_history else place(page, newer)


def _versions(index: Any, tree: MembrainTree, key: str, entry: Node, raw: bool) -> tuple[list[Any], list[str]]:
    """A hit's embeddings and texts for its calibrated score: its own, then those of the
    versions its index credits it with (scores.features), then, where raw items are searched,
    those of the input it was formed from (the slot the two share: :func:`rank`)."""
    former = index.former(key)
    vecs, texts = [entry.embedding, *(vec for _, vec in former)], [entry.text, *(text for text, _ in former)]
    origin = origin_of(tree, key) if raw else key
    if origin != key and origin in tree.archive:
        vecs.append(tree.archive[origin].embedding)
        texts.append(tree.archive[origin].text)
    return vecs, texts


def _superseders(forest: Forest, ns: Namespace, tree: MembrainTree, keys: list[str], filter: dict[str, Any] | None,
                 kinds: Sequence[MemoryKind], query: Any) -> dict[tuple, tuple[MemoryRecord, bool]]:
    """{(ns, key): (the record of the newer current fact that comes before it, whether it
    supersedes it)} for the current facts among ``keys`` that have one (supersession.superseder,
    ``query`` the query's embedding); call under the namespace's lock."""
    index = forest.index(ns)
    if index is None or not index.config.supersession:
        return {}
    passes = _passes(tree, filter)

    def eligible(key: str) -> bool:
        return kind_of(tree, key) in kinds and passes(key)

    out: dict[tuple, tuple[MemoryRecord, bool]] = {}
    for key in keys:
        found = superseder(tree, index.nearest, key, eligible, query)
        if found is not None:
            out[ns, key] = (record_of(ns, tree, found.key), found.supersedes)
    return out


def _merged(hits: list[MemoryRecord], vectors: dict[tuple[Namespace, str], Any],
            probs: dict[tuple[Namespace, str], tuple[float, int]], embedded: dict[str, np.ndarray], query: str,
            include_history: bool, embed: Embed) -> list[MemoryRecord]:
    """The hits of a query, best first, each ``score`` set on its reported scale.

    Without history, a hit's score is its calibrated relevance (scores.calibrated: the
    probability that it is relevant, comparable across namespaces), non-increasing down its
    namespace's ranking (scores.non_increasing); the namespaces' lists merge by it, equal
    scores in their namespace's order, and across namespaces the higher cosine with the
    query first. With include_history the plain cosine with
    the query ranks current and archived versions together, clipped to [0, 1]."""
    merging = len({h.namespace for h in hits if h.score is not None}) > 1
    q = None
    if vectors and (include_history or merging):
        q = next(iter(embedded.values())) if len(embedded) == 1 else embed([query])[0]
    ranked: list[tuple[tuple, MemoryRecord]] = []  # (what ranks it, the hit)
    for h in hits:
        rank_by: float | None = h.score
        position = 0
        tie = 0.0
        if rank_by is not None:
            if include_history:  # on one scale: the cosine, clipped to [0, 1]
                assert q is not None  # a scored hit has a vector, so q was embedded
                rank_by = cosine(vectors[h.namespace, h.key], q)
                h = replace(h, score=min(max(rank_by, 0.0), 1.0))
            else:
                tie = cosine(vectors[h.namespace, h.key], q) if merging and q is not None else 0.0
                rank_by, position = probs[h.namespace, h.key]
                h = replace(h, score=rank_by)
        # As LangGraph's stores do, items stored without an embedding come last, unscored.
        ranked.append(((rank_by is None, -(rank_by or 0.0), position, -tie, -h.updated_at), h))
    ranked.sort(key=lambda p: p[0])
    return [h for _, h in ranked]
