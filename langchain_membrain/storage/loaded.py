"""One namespace as a process holds it, and how its search index follows its tree.

:class:`Loaded` is the record :class:`~.forest.Forest` keeps per loaded namespace: the tree,
the stored version it reflects, its search index and what that index holds. The functions
here keep that index in step with the tree: :func:`sync_index` after a write (the rows it
changed), :func:`record_loaded` and :func:`build_index` after a load. An index holds a
namespace's facts with an embedding and its raw items (ignored items lend their words to
their session's neighbours); a fact is credited with its former versions, a raw item with
the facts formed from it (index/facts.py, "Former versions").
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any, Callable

from ..index.facts import FactIndex
from ..tree.archive import HISTORY_KEY
from ..tree.kinds import SOURCES_KEY
from ..tree.nodes import Node
from ..tree.tree import MembrainTree

#: What an empty set field of :class:`Loaded` holds: one shared empty set, not 216 bytes of
#: an empty ``set()`` in each of thousands of namespaces (a write that adds to one makes it
#: its own set).
NO_IDS: frozenset[str] = frozenset()


@dataclass(slots=True)
class Loaded:
    """One namespace as this process holds it (read and written under its lock)."""

    tree: MembrainTree
    synced: int = 0  # the stored version the tree reflects (0: not stored yet)
    index: FactIndex | None = None  # created by the first write that reaches the index
    # For each indexed fact, the (text, value) it was indexed with: a write that only moved
    # a fact in the tree does not touch the index (same_indexed). The value is the tree's
    # own object, not a copy: a write replaces a node's metadata whole, never in place.
    indexed: dict[str, tuple[str, Any]] = field(default_factory=dict)
    # Facts stored without an embedding: listed, unscored, after a query's hits.
    unindexed: set[str] | frozenset[str] = NO_IDS
    # The keys of facts with archived versions (a superset: the archive is scanned once per
    # load, then kept up to date by each write), whose former versions the index credits.
    # None until the first write reaches the index.
    versioned: set[str] | frozenset[str] | None = None
    # Formed facts -> the raw items they came from, and back: a raw item is searched with
    # its facts' words and embeddings too (as a fact with its former versions).
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)
    formed: dict[str, set[str]] = field(default_factory=dict)
    # The stored version the saved index on disk reflects (index_cache.py): restored from
    # it or written to it; -1 when this process's index is not known to be saved.
    saved: int = -1
    # The same for the saved tree (tree_cache.py).
    tree_saved: int = -1


def sync_index(state: Loaded, new_index: Callable[[], FactIndex], rows: list[dict[str, Any]], removed: list[str],
               *, defer_ann: bool = False) -> None:
    """Bring a loaded namespace's search index up to date with a write's changed rows
    (``defer_ann``: see :meth:`FactIndex.add`), and the former versions credited to the
    facts they concern (``FactIndex.set_former``) from the tree's archive."""
    if state.index is None:
        state.index, state.indexed, state.unindexed = new_index(), {}, NO_IDS
    index, seen = state.index, state.indexed
    # The sets are worked on in place (O(change)); an empty one is the shared NO_IDS,
    # swapped for a set of its own here and back after (see NO_IDS).
    unindexed = state.unindexed = state.unindexed if isinstance(state.unindexed, set) else set()
    # Facts whose former versions may have changed: the keys of history entries written
    # or removed (an entry is named "KEY@vN", MembrainTree.supersede), and written facts
    # with archived versions.
    if state.versioned is None:
        state.versioned = {e.metadata.get(HISTORY_KEY, {}).get("key")
                           for e in state.tree.archive.values() if e.kind == "history"}
    versioned = state.versioned if isinstance(state.versioned, set) else set()
    changed = {r["metadata"].get(HISTORY_KEY, {}).get("key") for r in rows if r["kind"] == "history"}
    versioned |= changed
    state.versioned = versioned or NO_IDS
    changed |= {rid.rpartition("@v")[0] for rid in removed} & versioned
    enriched: set[str] = set()  # raw items whose formed facts changed
    for rid in removed:
        enriched |= set_sources(state, rid, ())
        index.remove_context(rid)  # a purged ignored item (no-op otherwise)
        if rid in index:
            index.remove(rid)
        seen.pop(rid, None)
        unindexed.discard(rid)
    for row in rows:
        if row["kind"] == "ignored":  # its words join its session neighbours' fields
            index.add_context(row["id"], row["text"], row["metadata"].get("value") or {})
            continue
        if row["kind"] not in ("fact", "raw"):
            continue
        rid, meta = row["id"], row["metadata"]
        if row["kind"] == "raw" and row["embedding"] is None:
            continue  # a raw item kept without an embedding is provenance only
        if row["kind"] == "fact" and (not meta.get("indexed") or row["embedding"] is None):
            if rid in index:
                index.remove(rid)
                seen.pop(rid, None)
            unindexed.add(rid)
            continue
        unindexed.discard(rid)
        value = meta.get("value") or {}
        if row["kind"] == "fact":
            enriched |= set_sources(state, rid, tuple(meta.get(SOURCES_KEY) or ()))
            if rid in state.sources:  # its raw item stands in its session's order, not it
                value = {k: v for k, v in value.items() if k != "session"}
        if same_indexed(seen.get(rid), row["text"], value):
            continue  # moved in the tree only: the index does not care
        if rid in index:
            index.update(rid, text=row["text"], embedding=row["embedding"], metadata=value, defer_ann=defer_ann)
        else:
            index.add(rid, row["text"], row["embedding"], metadata=value, defer_ann=defer_ann)
        seen[rid] = (row["text"], value)
        if rid in versioned:
            changed.add(rid)
    if not unindexed:
        state.unindexed = NO_IDS
    tree = state.tree
    for raw in (r for r in enriched if r in index):
        facts = sorted((tree.node(f) for f in state.formed.get(raw, ()) if f in tree), key=lambda n: n.seq)
        index.set_former(raw, [(n.text, n.embedding) for n in facts])
    changed = {k for k in changed if k in index}
    if changed:
        former = state.tree.former_versions(changed)
        for key in changed:
            index.set_former(key, [(n.text, n.embedding) for n in former.get(key, [])])


def set_sources(state: Loaded, fact: str, sources: tuple[str, ...]) -> set[str]:
    """Record that ``fact`` was formed from ``sources`` (() for none, or gone); returns
    the raw items whose facts changed."""
    old = state.sources.get(fact, ())
    if old == sources:
        return set()
    for raw in old:
        state.formed.get(raw, set()).discard(fact)
    for raw in sources:
        state.formed.setdefault(raw, set()).add(fact)
    if sources:
        state.sources[fact] = sources
    else:
        state.sources.pop(fact, None)
    return set(old) | set(sources)


def record_loaded(state: Loaded, entries: list[Node]) -> list[tuple[Node, Any, bool]]:
    """Record in ``state`` what its index is to hold for a namespace just loaded, from
    ``entries`` (its facts, raw and ignored items, in any order): ``indexed``,
    ``unindexed``, ``versioned`` and the formed facts' sources, as :func:`sync_index` of each
    entry's row in turn would; returns what the index holds (node, value indexed, whether
    it is context only), for :func:`build_index`."""
    seen: dict[str, tuple[str, Any]] = {}
    unindexed: set[str] = set()
    kept: list[tuple[Node, Any, bool]] = []  # what the index holds: node, value indexed, context
    for n in entries:
        value = n.metadata.get("value") or {}
        if n.kind == "ignored":  # its words join its session neighbours' fields
            kept.append((n, value, True))
            continue
        if n.kind == "raw" and n.embedding is None:
            continue  # a raw item kept without an embedding is provenance only
        if n.kind == "fact" and (not n.metadata.get("indexed") or n.embedding is None):
            unindexed.add(n.id)
            continue
        sources = n.metadata.get(SOURCES_KEY)  # none for most facts: a fresh state records nothing then
        if n.kind == "fact" and sources and set_sources(state, n.id, tuple(sources)):
            value = {k: v for k, v in value.items() if k != "session"}  # as sync_index indexes it
        kept.append((n, value, False))
        seen[n.id] = (n.text, value)
    versioned = {e.metadata.get(HISTORY_KEY, {}).get("key")
                 for e in state.tree.archive.values() if e.kind == "history"}
    state.indexed, state.unindexed, state.versioned = seen, unindexed or NO_IDS, versioned or NO_IDS
    return kept


def build_index(state: Loaded, kept: list[tuple[Node, Any, bool]], new_index: Callable[[], FactIndex]) -> None:
    """Build ``state``'s index from what :func:`record_loaded` kept: oldest first in one
    :meth:`FactIndex.add_many`, then the former versions of its facts and the formed facts of
    its raw items."""
    index = state.index = new_index()
    kept.sort(key=lambda k: (k[0].created_at, k[0].seq))  # stable: as in_order(entries) orders them
    index.add_many((n.id, n.text, None if context else n.embedding, value, context) for n, value, context in kept)
    for raw, facts in state.formed.items():
        if raw in index:
            nodes = sorted((state.tree.node(f) for f in facts if f in state.tree), key=lambda n: n.seq)
            index.set_former(raw, [(n.text, n.embedding) for n in nodes])
    changed = {k for k in (state.versioned or ()) if k in index}
    if changed:
        former = state.tree.former_versions(changed)
        for key in changed:
            index.set_former(key, [(v.text, v.embedding) for v in former.get(key, [])])


def same_indexed(indexed: tuple[str, Any] | None, text: str, value: Any) -> bool:
    """Whether a fact indexed with ``indexed`` (its ``(text, value)``, None: not indexed) has
    ``text`` and ``value`` still: the same text and the same value as JSON (with sorted
    keys: ``1`` and ``1.0`` differ, as they do to the chat scorers). The JSON is written
    only here, for a fact written again, not for each fact indexed."""
    if indexed is None or indexed[0] != text:
        return False
    return indexed[1] is value or json.dumps(indexed[1], sort_keys=True) == json.dumps(value, sort_keys=True)


def entries_of(tree: MembrainTree, *, ordered: bool = True) -> list[Node]:
    """What a namespace's index holds: its facts, raw and ignored items; ``ordered``: in the
    order it indexes them at load (:func:`in_order`)."""
    entries = [tree.node(f) for f in tree.facts()] + tree.archived("raw") + tree.archived("ignored")
    return in_order(entries) if ordered else entries


def in_order(entries: list[Node]) -> list[Node]:
    """``entries`` (sorted in place) in the order they came, so that sessions read as they
    were said."""
    entries.sort(key=attrgetter("created_at", "seq"))
    return entries
