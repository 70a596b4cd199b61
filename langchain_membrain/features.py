"""Node features: the tokens the stage-1 and stage-2 networks read.

Pure functions of the tree (nothing is written). Every node becomes a token made of

- two text embeddings: ``label`` (a fact's text embedding, an aspect's label embedding,
  zeros when there is none) and ``mean`` (the mean embedding of the facts at or below the
  node, zeros for an empty node);
- a ``kind`` id (:data:`KINDS`) and a ``role`` id (:data:`ROLES`);
- a vector ``num`` of numeric features: depth, number of children and of facts below,
  and cosine similarities to the new fact (stage 1) or the focal fact (stage 2), plus the
  quantities a teacher compares (margins, leave-one-out similarities, clustering).

The networks could learn such similarities from the raw embeddings, but only from many
examples; handing them the cosines and margins directly is what makes online imitation
fast (design, section 6; issue 3, "goals").

Definitions used below (``cos`` is cosine similarity, 0 for a missing or zero vector):

- ``mean(n)``: mean embedding of the facts at or below ``n``.
- leave-one-out similarity of a fact ``f`` to an ancestor ``a``:
  ``cos(e_f, (S_a - e_f) / (n_a - 1))`` with ``S_a`` the sum and ``n_a`` the count of the
  embedded facts below ``a``; 0 when ``f`` is the only fact there. It asks "does ``f`` fit
  the *other* facts of ``a``", which plain ``cos(e_f, mean(a))`` overstates for small ``a``.
- clustering of a parent's fact children: average-linkage agglomerative clustering on the
  distance ``1 - cos``; the *cophenetic similarity* of two facts is one minus the height at
  which they first share a cluster, so "same cluster when cut at similarity ``t``" is
  exactly "cophenetic similarity >= t" for every ``t``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy.cluster.hierarchy import cophenet, linkage

from .teachers.base import NewFact, Subtree
from .tree import Closure, MembrainTree

KINDS: tuple[str, ...] = ("pad", "new", "root", "aspect", "fact")
ROLES: tuple[str, ...] = ("pad", "new", "current", "child", "self", "sibling", "parent", "uncle", "grandparent")
KIND_ID = {k: i for i, k in enumerate(KINDS)}
ROLE_ID = {r: i for i, r in enumerate(ROLES)}

# Similarity cuts at which each fact's cluster size is reported (stage 2). A grid, not a
# tuned threshold: the network reads the sizes at all cuts and learns where its teacher cuts.
CLUSTER_CUTS: tuple[float, ...] = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
DEPTH_SCALE = 10.0
COUNT_SCALE = 5.0  # log1p(count) / COUNT_SCALE keeps counts near [0, 1.5]

STAGE1_NUM = 14
STAGE2_NUM = 19 + len(CLUSTER_CUTS)
DEMOTE_PAIR_NUM = 6
GROUP_PAIR_NUM = 5


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; zero rows stay zero."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def _count(n: float) -> float:
    return float(np.log1p(n) / COUNT_SCALE)


def _vec(v: np.ndarray | None, dim: int) -> np.ndarray:
    return np.zeros(dim, np.float32) if v is None else np.asarray(v, np.float32)


def _node_vectors(tree: MembrainTree, ids: Sequence[str], dim: int) -> tuple[np.ndarray, np.ndarray]:
    """(label, mean) embeddings of ``ids`` as two (len(ids), dim) float32 arrays."""
    label = np.zeros((len(ids), dim), np.float32)
    mean = np.zeros((len(ids), dim), np.float32)
    for i, nid in enumerate(ids):
        node = tree.node(nid)
        if node.embedding is not None:
            label[i] = node.embedding
        if node.emb_count:
            mean[i] = node.emb_sum / node.emb_count
    return label, mean


def _tree_dim(tree: MembrainTree, fallback: np.ndarray | None = None) -> int:
    if tree.dim is not None:
        return int(tree.dim)
    if fallback is not None:
        return int(np.asarray(fallback).size)
    raise ValueError("the tree has no embeddings yet and no fact embedding was given")


# ----------------------------------------------------------------------------- stage 1
@dataclass
class Stage1Features:
    """Tokens of one stage-1 decision.

    Token 0 is the new fact, tokens ``1 .. n_candidates`` are ``subtree.candidates`` in
    order (token 1 is the current node: "attach here"), the remaining tokens are the current
    node's child facts (context only: never a candidate).
    """

    label: np.ndarray  # (T, dim) float32
    mean: np.ndarray  # (T, dim) float32
    kind: np.ndarray  # (T,) int64, index into KINDS
    role: np.ndarray  # (T,) int64, index into ROLES
    num: np.ndarray  # (T, STAGE1_NUM) float32
    n_candidates: int

    @property
    def n_tokens(self) -> int:
        return int(self.kind.shape[0])


def stage1_features(tree: MembrainTree, new_fact: NewFact, subtree: Subtree, *,
                    max_facts: int = 16) -> Stage1Features:
    """Features of a two-layer subtree for placing ``new_fact``.

    Numeric features per token (``cos_m`` is the cosine between the new fact and the
    token's mean embedding, ``best``/``second`` the two largest ``cos_m`` over the child
    aspect candidates, 0 when absent):

    0 depth / 10; 1 log1p(children); 2 log1p(facts below); 3 cos to label; 4 ``cos_m``;
    5 ``cos_m - best`` (0 for the best aspect); 6 is the best aspect; 7 ``best - second``
    for the best aspect, ``cos_m - best`` otherwise; 8 share of the current node's facts
    below this node; 9 depth of the current node / 10 (all tokens); 10 ``best`` (all
    tokens); 11 ``cos_m`` of the current node (all tokens); 12 is a candidate;
    13 number of aspect candidates / 10 (all tokens).

    At most ``max_facts`` child facts are kept as context, the most similar first.
    """
    q = np.asarray(new_fact.embedding, np.float32)
    dim = _tree_dim(tree, q)
    cur = subtree.node_id
    cands = list(subtree.candidates)
    facts = tree.child_facts(cur)
    if len(facts) > max_facts:
        fl, fm = _node_vectors(tree, facts, dim)
        sims = _unit(fm) @ _unit(q[None])[0]
        keep = np.argsort(-sims, kind="stable")[:max_facts]
        facts = [facts[i] for i in sorted(keep.tolist())]
    ids = cands + facts
    label, mean = _node_vectors(tree, ids, dim)
    qu = _unit(q[None])[0]
    cos_l = _unit(label) @ qu
    cos_m = _unit(mean) @ qu
    n_c = len(cands)
    aspect_sims = cos_m[1:n_c]
    order = np.argsort(-aspect_sims, kind="stable")
    best = float(aspect_sims[order[0]]) if len(order) else 0.0
    second = float(aspect_sims[order[1]]) if len(order) > 1 else 0.0
    best_tok = 1 + int(order[0]) if len(order) else -1
    cur_depth = tree.depth(cur)
    cur_facts = max(tree.fact_count(cur), 1)

    T = 1 + len(ids)
    num = np.zeros((T, STAGE1_NUM), np.float32)
    kind = np.zeros(T, np.int64)
    role = np.zeros(T, np.int64)
    kind[0], role[0] = KIND_ID["new"], ROLE_ID["new"]
    num[0, 3] = num[0, 4] = 1.0
    num[0, 0] = (cur_depth + 1) / DEPTH_SCALE
    for j, nid in enumerate(ids):
        t = j + 1
        node = tree.node(nid)
        kind[t] = KIND_ID[node.kind]
        role[t] = ROLE_ID["current"] if j == 0 else ROLE_ID["child"]
        depth = cur_depth + (0 if j == 0 else 1)
        num[t, 0] = depth / DEPTH_SCALE
        num[t, 1] = _count(tree.graph.out_degree(nid))
        num[t, 2] = _count(node.n_facts)
        num[t, 3] = cos_l[j]
        num[t, 4] = cos_m[j]
        num[t, 5] = cos_m[j] - best
        is_best = t == best_tok
        num[t, 6] = float(is_best)
        num[t, 7] = (best - second) if is_best else cos_m[j] - best
        num[t, 8] = node.n_facts / cur_facts
        num[t, 12] = float(j < n_c)
    num[:, 9] = cur_depth / DEPTH_SCALE
    num[:, 10] = best
    num[:, 11] = cos_m[0]
    num[:, 13] = (n_c - 1) / 10.0
    label = np.concatenate([q[None], label])
    mean = np.concatenate([q[None], mean])
    return Stage1Features(label, mean, kind, role, num, n_c)


# ----------------------------------------------------------------------------- stage 2
@dataclass
class Stage2Features:
    """Tokens of one stage-2 decision over the closure of ``focal_id``.

    ``fact_ids`` are the *actable* facts: the focal fact (first) and its sibling facts,
    i.e. the facts whose parent is the closure's parent; ``aspect_ids`` are the parent's
    child aspects (Demote targets). ``fact_tok``/``aspect_tok`` give their token indices.
    """

    label: np.ndarray  # (T, dim)
    mean: np.ndarray  # (T, dim)
    kind: np.ndarray  # (T,)
    role: np.ndarray  # (T,)
    num: np.ndarray  # (T, STAGE2_NUM)
    node_ids: list[str]  # one per token
    fact_tok: np.ndarray  # (N,) int64
    aspect_tok: np.ndarray  # (A,) int64
    demote_pair: np.ndarray  # (N, A, DEMOTE_PAIR_NUM)
    group_pair: np.ndarray  # (N, N, GROUP_PAIR_NUM)
    focal_id: str
    parent_id: str
    grandparent_id: str | None

    @property
    def fact_ids(self) -> list[str]:
        return [self.node_ids[i] for i in self.fact_tok]

    @property
    def aspect_ids(self) -> list[str]:
        return [self.node_ids[i] for i in self.aspect_tok]

    @property
    def can_promote(self) -> bool:
        return self.grandparent_id is not None

    def type_mask(self) -> np.ndarray:
        """(N, 4) bool: which of idle/promote/demote/group is possible for each fact."""
        n = len(self.fact_tok)
        mask = np.ones((n, 4), bool)
        mask[:, 1] = self.can_promote
        mask[:, 2] = len(self.aspect_tok) > 0
        mask[:, 3] = n >= 2
        return mask


def _cophenetic_similarity(unit_vecs: np.ndarray) -> np.ndarray:
    """(n, n) cophenetic similarity of average-linkage clustering on ``1 - cos``; the
    diagonal is 1. For n < 2 it is the (1, 1) or (0, 0) identity."""
    n = unit_vecs.shape[0]
    if n < 2:
        return np.ones((n, n), np.float32)
    sims = np.clip(unit_vecs @ unit_vecs.T, -1.0, 1.0)
    dist = 1.0 - sims[np.triu_indices(n, 1)]
    z = linkage(np.maximum(dist, 0.0).astype(np.float64), method="average")
    coph = 1.0 - cophenet(z)
    out = np.ones((n, n), np.float32)
    iu = np.triu_indices(n, 1)
    out[iu] = coph
    out[(iu[1], iu[0])] = coph
    return out


def _loo_cos(e: np.ndarray, node_sum: np.ndarray | None, node_count: int) -> float:
    """Leave-one-out cosine of unit vector ``e`` to the mean of the others below a node."""
    if node_sum is None or node_count < 2:
        return 0.0
    rest = node_sum - e
    n = np.linalg.norm(rest)
    return float(rest @ e / n) if n > 0 else 0.0


def stage2_features(tree: MembrainTree, closure: Closure, *, max_facts: int = 48,
                    max_aspects: int = 24, max_uncles: int = 24) -> Stage2Features:
    """Features of a closure (design section 4) for the stage-2 decision.

    Tokens: focal fact, sibling facts, sibling aspects, parent, uncles, grandparent. Very
    crowded parents keep the ``max_facts`` sibling facts (``max_aspects`` aspects,
    ``max_uncles`` uncles) most similar to the focal fact; clustering always uses all of
    the parent's facts.

    Numeric features per token (``e`` its unit embedding; focal ``q``; ``p`` the parent,
    ``g`` the grandparent); the fact-only ones are 0 on other tokens:

    0 depth / 10; 1 log1p(children); 2 log1p(facts below); 3 cos(q, label); 4 cos(q, mean);
    5 has a grandparent; 6 log1p(parent's fact children); 7 log1p(parent's aspect
    children); 8 leave-one-out cos to ``p`` (``loo_p``); 9 leave-one-out cos to ``g``
    (``loo_g``); 10 ``loo_g - loo_p``; 11 cos to ``mean(p)``; 12 cos to ``mean(g)``;
    13 best cos to a sibling aspect's mean (``best_a``); 14 ``best_a - loo_p``; 15 best cos
    to a sibling aspect's label; 16 best cos to another fact of ``p``; 17 mean cos to the
    other facts of ``p``; 18 cos(e, q); 19.. log1p(cluster size) at each of
    :data:`CLUSTER_CUTS` (the fact's own average-linkage cluster among ``p``'s facts).

    Demote pair features (fact, aspect): cos to the aspect's mean, that minus ``loo_p``,
    cos to its label, log1p(its facts), is the fact's best aspect, that margin over the
    second best. Group pair features (fact, fact): cos, cophenetic similarity, both have
    each other as nearest fact, mean of their ``loo_p``, whether both cluster sizes at
    cut 0.5 are >= 2.
    """
    focal = closure.fact_id
    parent = closure.parent_id
    gp = closure.grandparent_id
    dim = _tree_dim(tree)
    q = _unit(_vec(tree.node(focal).embedding, dim)[None])[0]

    all_facts = [focal] + [c for c in tree.child_facts(parent) if c != focal]
    all_aspects = tree.child_aspects(parent)
    uncles = [m.node_id for m in closure.members if m.role == "uncle"]

    f_label, _ = _node_vectors(tree, all_facts, dim)
    f_unit = _unit(f_label)
    fsims = f_unit @ f_unit.T  # (F, F) all facts of the parent
    coph = _cophenetic_similarity(f_unit)

    def top(ids: list[str], k: int, first_fixed: bool = False) -> list[int]:
        if len(ids) <= k:
            return list(range(len(ids)))
        _, m = _node_vectors(tree, ids, dim)
        s = _unit(m) @ q
        if first_fixed:
            s[0] = np.inf
        return sorted(np.argsort(-s, kind="stable")[:k].tolist())

    keep_f = top(all_facts, max_facts, first_fixed=True)
    facts = [all_facts[i] for i in keep_f]
    aspects = [all_aspects[i] for i in top(all_aspects, max_aspects)]
    uncles = [uncles[i] for i in top(uncles, max_uncles)]

    ids = facts + aspects + [parent] + uncles + ([gp] if gp else [])
    roles = (["self"] + ["sibling"] * (len(facts) - 1) + ["sibling"] * len(aspects) + ["parent"]
             + ["uncle"] * len(uncles) + (["grandparent"] if gp else []))
    label, mean = _node_vectors(tree, ids, dim)
    cos_l = _unit(label) @ q
    cos_m = _unit(mean) @ q
    T = len(ids)
    num = np.zeros((T, STAGE2_NUM), np.float32)
    kind = np.array([KIND_ID[tree.node(i).kind] for i in ids], np.int64)
    role = np.array([ROLE_ID[r] for r in roles], np.int64)
    depth_p = tree.depth(parent)
    pnode = tree.node(parent)
    gnode = tree.node(gp) if gp else None
    for t, nid in enumerate(ids):
        node = tree.node(nid)
        r = roles[t]
        d = {"self": depth_p + 1, "sibling": depth_p + 1, "parent": depth_p, "uncle": depth_p,
             "grandparent": depth_p - 1}[r]
        num[t, 0] = d / DEPTH_SCALE
        num[t, 1] = _count(tree.graph.out_degree(nid))
        num[t, 2] = _count(node.n_facts)
    num[:, 3] = cos_l
    num[:, 4] = cos_m
    num[:, 5] = float(gp is not None)
    num[:, 6] = _count(len(all_facts))
    num[:, 7] = _count(len(all_aspects))

    # Fact-only quantities, for every fact of the parent (kept ones are copied to tokens).
    a_label, a_mean = _node_vectors(tree, all_aspects, dim)
    a_sims = f_unit @ _unit(a_mean).T if all_aspects else np.zeros((len(all_facts), 0), np.float32)
    a_lsims = f_unit @ _unit(a_label).T if all_aspects else a_sims
    p_mean_u = _unit(_vec(pnode.mean_embedding, dim)[None])[0]
    g_mean_u = _unit(_vec(gnode.mean_embedding, dim)[None])[0] if gnode else np.zeros(dim, np.float32)
    n_all = len(all_facts)
    other = fsims - np.eye(n_all, dtype=fsims.dtype) * 2.0  # exclude self from "best other"
    best_other = other.max(1) if n_all > 1 else np.zeros(n_all, np.float32)
    mean_other = (fsims.sum(1) - 1.0) / max(n_all - 1, 1) if n_all > 1 else np.zeros(n_all, np.float32)
    cluster_sizes = np.stack([(coph >= c).sum(1) for c in CLUSTER_CUTS], axis=1)  # (F, cuts)
    loo_p = np.zeros(n_all, np.float32)
    loo_g = np.zeros(n_all, np.float32)
    for i, fid in enumerate(all_facts):
        fnode = tree.node(fid)
        if fnode.embedding is None:
            continue
        e = fnode.embedding.astype(np.float64)
        loo_p[i] = _loo_cos(e, pnode.emb_sum, pnode.emb_count) / max(np.linalg.norm(e), 1e-12)
        if gnode is not None:
            loo_g[i] = _loo_cos(e, gnode.emb_sum, gnode.emb_count) / max(np.linalg.norm(e), 1e-12)
    best_a = a_sims.max(1) if all_aspects else np.zeros(n_all, np.float32)
    best_al = a_lsims.max(1) if all_aspects else np.zeros(n_all, np.float32)
    for k, i in enumerate(keep_f):
        t = k  # facts come first among the tokens
        num[t, 8] = loo_p[i]
        num[t, 9] = loo_g[i]
        num[t, 10] = loo_g[i] - loo_p[i] if gnode is not None else 0.0
        num[t, 11] = f_unit[i] @ p_mean_u
        num[t, 12] = f_unit[i] @ g_mean_u
        num[t, 13] = best_a[i]
        num[t, 14] = best_a[i] - loo_p[i] if all_aspects else 0.0
        num[t, 15] = best_al[i]
        num[t, 16] = best_other[i]
        num[t, 17] = mean_other[i]
        num[t, 18] = f_unit[i] @ q
        num[t, 19:] = np.log1p(cluster_sizes[i]) / COUNT_SCALE

    n_f, n_a = len(facts), len(aspects)
    fact_tok = np.arange(n_f, dtype=np.int64)
    aspect_tok = np.arange(n_f, n_f + n_a, dtype=np.int64)
    keep_a = [all_aspects.index(a) for a in aspects]

    demote = np.zeros((n_f, n_a, DEMOTE_PAIR_NUM), np.float32)
    if n_a:
        s = a_sims[np.ix_(keep_f, keep_a)]
        ls = a_lsims[np.ix_(keep_f, keep_a)]
        srt = np.sort(s, axis=1)
        best = srt[:, -1:]
        second = srt[:, -2:-1] if n_a > 1 else np.zeros_like(best)
        demote[..., 0] = s
        demote[..., 1] = s - loo_p[keep_f][:, None]
        demote[..., 2] = ls
        demote[..., 3] = np.array([_count(tree.node(a).n_facts) for a in aspects], np.float32)[None]
        is_best = s >= best
        demote[..., 4] = is_best
        demote[..., 5] = np.where(is_best, best - second, s - best)

    group = np.zeros((n_f, n_f, GROUP_PAIR_NUM), np.float32)
    if n_f > 1:
        kf = np.array(keep_f)
        nearest = np.argmax(other, axis=1)
        group[..., 0] = fsims[np.ix_(kf, kf)]
        group[..., 1] = coph[np.ix_(kf, kf)]
        group[..., 2] = (nearest[kf][:, None] == kf[None, :]) & (nearest[kf][None, :] == kf[:, None])
        group[..., 3] = (loo_p[kf][:, None] + loo_p[kf][None, :]) / 2
        in_c = cluster_sizes[kf, CLUSTER_CUTS.index(0.5)] >= 2
        group[..., 4] = in_c[:, None] & in_c[None, :]

    return Stage2Features(label, mean, kind, role, num, ids, fact_tok, aspect_tok, demote, group,
                          focal, parent, gp)
