"""The tree's part of a search score (index/facts.py's module docstring, "Topic match" and
the aspect prior): pure functions of a namespace's tree, read through its public methods
(``aspects``, ``node``, ``parent``, ``root_id``, ``in``), so that this package need not
import the tree's.
"""

from __future__ import annotations

from typing import Any, Callable, Hashable, Sequence

import numpy as np


def topic_match(tree: Any, qvec: np.ndarray, config: Any,
                moments: Callable[[np.ndarray], tuple[float, float]]) -> dict[str, float]:
    """The aspects matching the query -> their z. An aspect's cosine ``c(a)`` is the best of
    its label's and its facts' mean embedding's with ``qvec`` (aspects of at least
    ``config.tree_topic_min_facts`` facts); its z is ``(c(a) - mean) / std`` over the
    namespace's facts (``moments(q)``). None match unless the best z reaches
    ``config.tree_topic_min_z``; those within ``config.tree_topic_margin`` of the best do."""
    q = qvec.astype(np.float64)
    scored: dict[str, float] = {}
    for a in tree.aspects():
        node = tree.node(a)
        if node.n_facts < config.tree_topic_min_facts:
            continue
        c = -1.0
        for v in (node.embedding, node.mean_embedding):
            if v is not None:
                norm = float(np.linalg.norm(v))
                if norm > 0:
                    c = max(c, float(v @ q) / norm)
        if c > -1.0:
            scored[a] = c
    if not scored:
        return {}
    mean, std = moments(q)
    best = max(scored.values())
    if std <= 1e-12 or (best - mean) / std < config.tree_topic_min_z:
        return {}
    return {a: (c - mean) / std for a, c in scored.items() if c >= best - config.tree_topic_margin}


def topic_boost(tree: Any, topics: dict[str, float], ids: Sequence[Hashable]) -> np.ndarray:
    """Each fact's best matching ancestor's z (0 when none matches or the fact is not in
    ``tree``)."""
    out = np.zeros(len(ids))
    for i, node in enumerate(ids):
        if node not in tree:
            continue
        p = tree.parent(node)
        while p is not None:
            if p in topics:
                out[i] = max(out[i], topics[p])
            p = tree.parent(p)
    return out


def aspect_groups(tree: Any, ids: Sequence[Hashable]) -> np.ndarray:
    """Group number of each fact's parent aspect, numbered in order of first appearance;
    -1 under the root or outside ``tree``."""
    nums: dict[str, int] = {}
    out = np.full(len(ids), -1, dtype=np.int64)
    for i, fid in enumerate(ids):
        if fid in tree:
            p = tree.parent(fid)
            if p is not None and p != tree.root_id:
                out[i] = nums.setdefault(p, len(nums))
    return out


__all__ = ["aspect_groups", "topic_boost", "topic_match"]
