"""Where a new fact goes: the stage-1 descent, and a teacher's whole answer for one insert.

Definitions (design: stage 1 descends from the root; the closure is rewritten after):

- The **candidates** at node ``n`` are ``n`` itself (index 0: "attach here") followed by its
  child aspects; past ``top_k - 1`` child aspects, the ``top_k - 1`` whose mean embedding is
  most similar to the new fact are kept, in attachment order.
- The **descent** starts at the root and, at each node, asks ``choose(subtree)`` for an index
  into the candidates until it picks 0. It is the one descent loop of the package: the
  learner, the teachers and the benches all call :func:`descend`.
- A :class:`Placement` is a teacher's answer to the *joint question* about an insert: the
  path from the root to the parent it chose and the stage-2 actions to apply once the fact
  is attached there (the new fact is named :data:`NEW_FACT` in them), with the labels of any
  aspect its Groups create. One placement is one teacher question.

This module imports only the tree and the actions, so every layer above may use it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from .actions import Action, Demote, Group, Promote
from .tree import MembrainTree

DEFAULT_TOP_K = 32
MAX_DESCENT = 256  # a guard: a valid tree is never this deep in practice
NEW_FACT = "<new fact>"  # stands for the new fact's id in a Placement's actions


@dataclass
class NewFact:
    """A fact being inserted: its text, its embedding and the caller's metadata."""

    text: str
    embedding: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Subtree:
    """A two-layer subtree as a stage-1 decision sees it.

    ``candidates[0]`` is ``node_id`` (attach here); the rest are child aspects, possibly
    cut to the top-K most similar to the new fact.
    """

    tree: MembrainTree
    node_id: str
    candidates: list[str]


@dataclass
class Placement:
    """A teacher's answer to the joint question about one insert.

    ``path`` runs from the root to ``parent_id`` (both included); ``actions`` name the new
    fact as :data:`NEW_FACT` (use :meth:`bind`). ``fell_back`` is True when an LLM's answer
    was unusable and a fallback teacher chose the parent: ``actions`` is then empty and the
    fallback decides stage 2 once the fact is attached.
    """

    parent_id: str
    path: list[str]
    actions: list[Action] = field(default_factory=list)
    fell_back: bool = False

    def bind(self, fact_id: str) -> list[Action]:
        """The actions with :data:`NEW_FACT` replaced by the attached fact's id."""
        def sub(i: str) -> str:
            return fact_id if i == NEW_FACT else i

        out: list[Action] = []
        for a in self.actions:
            if isinstance(a, Promote):
                out.append(Promote(sub(a.node_id)))
            elif isinstance(a, Demote):
                out.append(Demote(sub(a.node_id), a.target_id))
            else:
                out.append(Group(tuple(sub(i) for i in a.node_ids), a.label, a.metadata, a.aspect_id))
        return out

    def next_choice(self, subtree: Subtree) -> int | None:
        """The stage-1 index this placement implies at ``subtree`` (None: not on the path)."""
        if subtree.node_id == self.parent_id:
            return 0
        if subtree.node_id in self.path[:-1]:
            nxt = self.path[self.path.index(subtree.node_id) + 1]
            if nxt in subtree.candidates:
                return subtree.candidates.index(nxt)
        return None


def attach(tree: MembrainTree, new_fact: NewFact, parent_id: str, *, node_id: str | None = None,
           created_at: float | None = None) -> str:
    """Attach the new fact under ``parent_id``; returns its id."""
    return tree.add_fact(parent_id, new_fact.text, embedding=new_fact.embedding, node_id=node_id,
                         metadata=new_fact.metadata, created_at=created_at)


def cosine(a: np.ndarray | None, b: np.ndarray | None) -> float:
    """Cosine similarity; 0.0 when either vector is missing or zero."""
    if a is None or b is None:
        return 0.0
    na, nb = float(np.linalg.norm(a)), float(np.linalg.norm(b))
    if na == 0.0 or nb == 0.0:
        return 0.0
    return float(np.dot(a, b) / (na * nb))


def stage1_candidates(tree: MembrainTree, node_id: str, query: np.ndarray | None,
                      top_k: int = DEFAULT_TOP_K) -> list[str]:
    """``node_id`` then its child aspects; a node with more than ``top_k - 1`` child aspects
    keeps the most similar to ``query`` (by mean embedding), in attachment order."""
    aspects = tree.child_aspects(node_id)
    if len(aspects) > top_k - 1 and query is not None:
        sims = [cosine(tree.mean_embedding(a), query) for a in aspects]
        keep = set(np.argsort(sims)[::-1][: max(top_k - 1, 0)].tolist())
        aspects = [a for i, a in enumerate(aspects) if i in keep]
    return [node_id, *aspects]


def descend(tree: MembrainTree, new_fact: NewFact, choose: Callable[[Subtree], int], *,
            top_k: int = DEFAULT_TOP_K, start: str | None = None) -> list[tuple[Subtree, int]]:
    """Stage 1: from ``start`` (default the root), ask ``choose`` at each level with a choice
    until it picks the current node. Returns the levels decided, as (subtree, index) pairs;
    the parent to attach under is :func:`destination` of them. A level without a child
    aspect is not asked (index 0). An out-of-range choice counts as "attach here"."""
    cur = tree.root_id if start is None else start
    steps: list[tuple[Subtree, int]] = []
    for _ in range(MAX_DESCENT):
        cands = stage1_candidates(tree, cur, new_fact.embedding, top_k)
        sub = Subtree(tree, cur, cands)
        i = choose(sub) if len(cands) > 1 else 0
        i = int(i) if isinstance(i, (int, np.integer)) and 0 <= i < len(cands) else 0
        steps.append((sub, i))
        if i == 0:
            break
        cur = cands[i]
    return steps


def destination(steps: list[tuple[Subtree, int]]) -> str:
    """The node a descent ended at (the last level's chosen candidate)."""
    sub, i = steps[-1]
    return sub.candidates[i]


def path_choices(tree: MembrainTree, new_fact: NewFact, path: list[str], *,
                 top_k: int = DEFAULT_TOP_K) -> list[tuple[Subtree, int]]:
    """The stage-1 levels a descent along ``path`` (root first) takes, as (subtree, index):
    at ``path[i]`` the index of ``path[i + 1]``, at the last node 0. Levels with no choice
    are left out; the walk stops early where the next node is not a candidate (cut by
    ``top_k``, or no longer a child)."""
    out: list[tuple[Subtree, int]] = []
    for i, node in enumerate(path):
        if node not in tree or tree.node(node).kind == "fact":
            break
        cands = stage1_candidates(tree, node, new_fact.embedding, top_k)
        nxt = path[i + 1] if i + 1 < len(path) else None
        if nxt is not None and nxt not in cands:
            break
        if len(cands) > 1:
            out.append((Subtree(tree, node, cands), 0 if nxt is None else cands.index(nxt)))
    return out


__all__ = ["DEFAULT_TOP_K", "MAX_DESCENT", "NEW_FACT", "NewFact", "Placement", "Subtree", "attach", "cosine", "descend",
           "destination", "path_choices", "stage1_candidates"]
