"""The insert routine as plain functions:

``embed -> stage-1 descent -> attach -> closure -> stage 2 -> decode -> apply -> train``.

This module holds the steps that do not depend on who decides (a teacher or a model);
the LangGraph graph (graph.py) and bulk ingestion call these same functions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from .actions import Action, apply_actions
from .teachers.base import NewFact, Subtree, Teacher
from .tree import MembrainTree

DEFAULT_TOP_K = 32
MAX_DESCENT = 256  # a guard: a valid tree is never this deep in practice


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


@dataclass
class Stage1Step:
    """One stage-1 decision: the subtree shown and the index chosen."""

    subtree: Subtree
    choice: int


def descend(tree: MembrainTree, new_fact: NewFact, choose: Callable[[Subtree], int], *,
            top_k: int = DEFAULT_TOP_K) -> tuple[str, list[Stage1Step]]:
    """Stage 1: from the root, ask ``choose`` at each level until it picks the current node.

    Returns the parent to attach under and the decisions taken. An out-of-range choice is
    treated as "attach here" (callers validate teacher answers before this point).
    """
    cur = tree.root_id
    steps: list[Stage1Step] = []
    for _ in range(MAX_DESCENT):
        cands = stage1_candidates(tree, cur, new_fact.embedding, top_k)
        sub = Subtree(tree, cur, cands)
        i = choose(sub) if len(cands) > 1 else 0
        i = i if 0 <= i < len(cands) else 0
        steps.append(Stage1Step(sub, i))
        if i == 0:
            return cur, steps
        cur = cands[i]
    return cur, steps


def attach(tree: MembrainTree, new_fact: NewFact, parent_id: str, *, node_id: str | None = None,
           created_at: float | None = None) -> str:
    """Attach the new fact under ``parent_id``; returns its id."""
    return tree.add_fact(parent_id, new_fact.text, embedding=new_fact.embedding, node_id=node_id,
                         metadata=new_fact.metadata, created_at=created_at)


def rewrite(tree: MembrainTree, actions: list[Action], *, name_aspect: Callable[[list[str]], str],
            embed_label: Callable[[str], Any] | None = None, allow_aspects: bool = False):
    """Stage 2: apply an action series in order, each re-validated; see actions.apply_actions."""
    return apply_actions(tree, actions, name_aspect=name_aspect, embed_label=embed_label,
                         allow_aspects=allow_aspects)


def insert_with_teacher(tree: MembrainTree, new_fact: NewFact, teacher: Teacher, *,
                        node_id: str | None = None, embed_label: Callable[[str], Any] | None = None,
                        top_k: int = DEFAULT_TOP_K, allow_aspects: bool = False) -> str:
    """The whole insert decided by ``teacher`` alone (teacher forcing, no model)."""
    parent, _ = descend(tree, new_fact, lambda sub: teacher.choose_stage1(new_fact, sub), top_k=top_k)
    fact_id = attach(tree, new_fact, parent, node_id=node_id)
    actions = teacher.choose_stage2(tree, tree.closure(fact_id))
    rewrite(tree, actions, name_aspect=teacher.name_aspect, embed_label=embed_label,
            allow_aspects=allow_aspects)
    return fact_id
