"""OracleTeacher: a teacher that knows the ground-truth hierarchy (evaluation only).

The heuristic teacher is a function of embedding similarities, so a student can at best copy
it. An LLM teacher knows what embeddings do not; to measure that offline, this teacher reads
the ground truth of the WordNet evaluation files, as an LLM with perfect world knowledge would.

Metadata it reads (the keys ``bench learning`` and ``bench hierarchy`` put on each fact):

- ``"id"``: the fact's own ground-truth node id (WordNet: ``wn30:n:<offset>``);
- ``"path_ids"``: the ids of its ground-truth ancestors, from the top down to its parent
  (``[]`` for the top node itself);
- ``"path"``: the same ancestors' names (used for labels; optional, ids are used otherwise).

Metadata it writes: every aspect it creates (through a Group) carries ``"gt_node"``, the id
of the ground-truth ancestor the aspect stands for. The tree's root stands for ``root_node``
when given, else for the top ancestor (``path_ids[0]``) as long as every fact seen so far
shares the same one, else for nothing.

Rules (``stands(n)``: the ancestor node ``n`` stands for; ``ancestors(f)``: ``path_ids``):

- stage 1: descend into the candidate aspect that stands for an ancestor of the fact (the
  deepest such one), else attach here;
- stage 2, for each fact child ``x`` of the new fact's parent ``P``: Promote(x) when P is an
  aspect that does not stand for an ancestor of ``x``; else Demote(x, S) into a sibling
  aspect S that stands for an ancestor of ``x``; facts left that share the next ancestor below
  ``stands(P)`` are grouped (label: that ancestor's name, metadata ``gt_node``: its id).

A fact without ground truth is left where stage 1 put it (attach at the root, no actions).
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

from ..teachers.base import BaseTeacher, sequential_placements
from ..tree.actions import Action, Demote, Group, Promote
from ..tree.placement import NewFact, Placement, Subtree
from ..tree.tree import Closure, MembrainTree

__all__ = ["GT_NODE", "META_ID", "META_PATH", "META_PATH_IDS", "OracleTeacher", "oracle_metadata"]

META_ID = "id"
META_PATH_IDS = "path_ids"
META_PATH = "path"
GT_NODE = "gt_node"


def ground_truth(metadata: dict[str, Any] | None) -> dict[str, Any]:
    """The ground-truth keys of a fact's metadata: the metadata itself, or the stored value
    when the fact came through ``MembrainMemory.add(text, metadata=oracle_metadata(...))``
    (which keeps the caller's fields under ``"value"``)."""
    metadata = metadata or {}
    value = metadata.get("value")
    if META_PATH_IDS not in metadata and isinstance(value, dict):
        return value
    return metadata


def oracle_metadata(fact_id: str | None, path_ids: list[str] | None, path: list[str] | None = None) -> dict[str, Any]:
    """The metadata a fact needs for the oracle (see the module docstring)."""
    return {META_ID: fact_id, META_PATH_IDS: list(path_ids or []), META_PATH: list(path or [])}


class OracleTeacher(BaseTeacher):
    """Decides from ground-truth ancestry read from fact metadata (module docstring).

    Args:
        root_node: the ground-truth node the tree's root stands for; None: inferred (the
            single top ancestor shared by every fact seen so far).
    """

    name = "oracle"
    fast = True

    def __init__(self, root_node: str | None = None):
        self.root_node = root_node
        self._names: dict[str, str] = {}  # ground-truth id -> name, learnt from paths
        self._lineage_by_text: dict[str, list[str]] = {}  # for name_aspect, which gets texts only
        self._tops: set[str] = set()
        self._lock = threading.Lock()

    # ------------------------------------------------------------- ground truth

    def place_batch(self, facts: Sequence[tuple[str, NewFact]], tree: MembrainTree) -> list[Placement]:
        """The batch question, answered fact by fact (it stands for an LLM shown all the facts
        in one request, as TopicTeacher does); see ``sequential_placements``."""
        return sequential_placements(self, facts, tree)
    def _learn(self, text: str, metadata: dict[str, Any]) -> list[str] | None:
        """The fact's ancestor ids (None without ground truth); remembers names on the way."""
        ids = metadata.get(META_PATH_IDS)
        if not isinstance(ids, list):
            return None
        names = metadata.get(META_PATH)
        with self._lock:
            if isinstance(names, list) and len(names) == len(ids):
                self._names.update(zip(ids, (str(n) for n in names)))
            own = metadata.get(META_ID)
            if own is not None and ": " in text:
                self._names.setdefault(str(own), text.split(": ", 1)[0])
            self._lineage_by_text[text] = list(ids)
            if ids:
                self._tops.add(ids[0])
        return list(ids)

    def _stands(self, tree: MembrainTree, node_id: str) -> str | None:
        node = tree.node(node_id)
        if node.kind == "root":
            if self.root_node is not None:
                return self.root_node
            with self._lock:
                return next(iter(self._tops)) if len(self._tops) == 1 else None
        if node.kind == "aspect":
            return node.metadata.get(GT_NODE)
        return None

    def _name(self, node: str) -> str:
        with self._lock:
            return self._names.get(node, node)

    # ------------------------------------------------------------------ stage 1
    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """The candidate aspect standing for the deepest ancestor of the fact, else 0."""
        ancestors = self._learn(new_fact.text, ground_truth(new_fact.metadata))
        if not ancestors:
            return 0
        depth_of: dict[str | None, int] = {a: i for i, a in enumerate(ancestors)}
        best_i, best_depth = 0, -1
        for i, cand in enumerate(subtree.candidates[1:], start=1):
            d = depth_of.get(self._stands(subtree.tree, cand), -1)
            if d > best_depth:
                best_i, best_depth = i, d
        return best_i

    # ------------------------------------------------------------------ stage 2
    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        """Promote facts whose parent is not an ancestor, Demote facts into a sibling aspect
        that is one, Group facts sharing the next ancestor below the parent's."""
        focal = tree.node(closure.fact_id)
        self._learn(focal.text, ground_truth(focal.metadata))
        parent = closure.parent_id
        p_node = tree.node(parent)
        here = self._stands(tree, parent)
        aspect_of = {self._stands(tree, a): a for a in tree.child_aspects(parent)}
        aspect_of.pop(None, None)
        actions: list[Action] = []
        groups: dict[str, list[str]] = {}
        for x in tree.child_facts(parent):
            ancestors = ground_truth(tree.node(x).metadata).get(META_PATH_IDS)
            if not isinstance(ancestors, list):
                continue
            if p_node.kind == "aspect" and here not in ancestors:
                actions.append(Promote(x))
                continue
            # The sibling aspect standing for the deepest ancestor of x, if any.
            target = next((aspect_of[a] for a in reversed(ancestors) if a in aspect_of), None)
            if target is not None:
                actions.append(Demote(x, target))
                continue
            if here in ancestors:
                below = ancestors.index(here) + 1
            elif here is None and p_node.kind == "root":
                below = 0
            else:
                continue
            if below < len(ancestors):
                groups.setdefault(ancestors[below], []).append(x)
        for node, members in groups.items():
            if len(members) >= 2:
                actions.append(Group(tuple(members), label=self._name(node), metadata={GT_NODE: node}))
        return actions

    # ------------------------------------------------------------------- naming
    def name_aspect(self, fact_texts: list[str]) -> str:
        """The name of the deepest ancestor shared by all the texts' facts (as seen by this
        teacher); ``"group"`` when they share none or are unknown."""
        with self._lock:
            lineages = [self._lineage_by_text.get(t) for t in fact_texts]
        if not lineages or any(not lin for lin in lineages):
            return "group"
        common = None
        for parts in zip(*lineages):
            if len(set(parts)) != 1:
                break
            common = parts[0]
        return self._name(common) if common is not None else "group"
