"""Aspect labels that follow their facts.

An aspect is named once, from the few facts it is created with; then facts keep arriving
and the label can stop describing them ("knee" over a subtree about running). Definitions:

- The **labelled size** of an aspect is the number of facts below it when its label was
  last set, kept in its metadata under :data:`LABELLED_FACTS`. Aspects without it (named
  at creation, by Group) count as labelled at :data:`CREATED_SIZE` facts.
- An aspect is **stale** when the facts below it have reached ``growth`` (4) times its
  labelled size, and at least ``min_facts`` (8). Renaming only when an aspect has grown
  fourfold keeps the cost at O(log n) namings per aspect over its life; small aspects keep the name they were
  created with, which still describes them (and costs no LLM call).
- The **typical facts** of an aspect are the ``k`` facts below it whose embeddings are
  nearest its mean embedding: what a new label is made from.
"""

from __future__ import annotations

import numpy as np

from .tree import MembrainTree

LABELLED_FACTS = "labelled_facts"
CREATED_SIZE = 2  # a Group makes an aspect from two or more facts


def labelled_size(tree: MembrainTree, aspect_id: str) -> int:
    """Facts below ``aspect_id`` when its label was set (see the module docstring)."""
    return int(tree.node(aspect_id).metadata.get(LABELLED_FACTS, CREATED_SIZE))


def stale_aspects(tree: MembrainTree, fact_id: str, *, growth: float = 4.0, min_facts: int = 8) -> list[str]:
    """The aspects on the path from the root to ``fact_id`` whose fact count has reached
    ``growth`` times their labelled size and ``min_facts``, top first. O(depth)."""
    return [a for a in tree.path(fact_id)[1:-1]
            if tree.node(a).kind == "aspect"
            and tree.fact_count(a) >= max(growth * labelled_size(tree, a), min_facts)]


def typical_facts(tree: MembrainTree, aspect_id: str, k: int = 12) -> list[str]:
    """Texts of the ``k`` facts below ``aspect_id`` nearest its mean embedding, nearest
    first (facts without an embedding come last, in tree order). O(facts below)."""
    facts = tree.facts_below(aspect_id)
    mean = tree.mean_embedding(aspect_id)
    if mean is None:
        return [tree.node(f).text for f in facts[:k]]
    embs = [tree.node(f).embedding for f in facts]
    sims = np.array([-np.inf if e is None else float(np.dot(e, mean)) for e in embs])
    order = np.argsort(-sims, kind="stable")[:k]
    return [tree.node(facts[i]).text for i in order]
