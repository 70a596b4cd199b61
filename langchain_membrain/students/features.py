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
fast (measured by ``bench learning``).

Definitions used below (``cos`` is cosine similarity, 0 for a missing or zero vector;
fact embeddings are taken as unit vectors, as all-MiniLM-L6-v2's are):

- ``m(n)``: mean embedding of the facts at or below ``n``; ``S(n)``, ``n(n)`` their sum
  and count (kept by the tree).
- *affinity* of a unit vector ``e`` to a set of facts: ``e . m`` with ``m`` their mean
  embedding, i.e. the mean cosine of ``e`` to the members (average linkage). Unlike
  ``cos(e, m)`` it shrinks as the set spreads out.
- leave-one-out affinity of a fact ``f`` to its parent ``P``:
  ``e_f . (S(P) - x_f) / (n(P) - 1)`` (``x_f`` the fact's stored embedding): does ``f`` fit
  the *other* facts of ``P``; 0 when ``f`` is alone there.
- clustering of a parent's fact children: average-linkage agglomerative clustering on the
  distance ``1 - cos``; the *cophenetic similarity* of two facts is one minus the height at
  which they first share a cluster, so "same cluster when cut at similarity ``t``" is
  exactly "cophenetic similarity >= t" for every ``t``.

These are the quantities an embedding-based teacher compares (see
``teachers/heuristic.py``), given as generic inputs: no threshold of a teacher is built
in; grids of cuts and one-hot depths let a linear read learn the teacher's thresholds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..tree.placement import NewFact, Subtree
from ..tree.tree import Closure, MembrainTree

KINDS: tuple[str, ...] = ("pad", "new", "root", "aspect", "fact")
ROLES: tuple[str, ...] = ("pad", "new", "current", "child", "self", "sibling", "parent", "uncle", "grandparent")
KIND_ID = {k: i for i, k in enumerate(KINDS)}
ROLE_ID = {r: i for i, r in enumerate(ROLES)}

# Similarity cuts at which each fact's cluster size is reported (stage 2). A grid, not a
# tuned threshold: the network reads the sizes at all cuts and learns where its teacher cuts.
CLUSTER_CUTS: tuple[float, ...] = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8)
# The same, relative to the coherence of the parent (its facts' mean pairwise similarity):
# "tighter than the parent by this much".
RELATIVE_CUTS: tuple[float, ...] = (0.0, 0.05, 0.1, 0.15)
DEPTH_SCALE = 10.0
COUNT_SCALE = 5.0  # log1p(count) / COUNT_SCALE keeps counts near [0, 1.5]

# Numeric feature columns, by name (the docstrings of the feature functions define them).
STAGE1_COLUMNS: tuple[str, ...] = (
    "depth", "children", "facts", "cos_label", "cos_mean", "aff", "aff_minus_best", "is_best_aff",
    "cos_minus_best", "is_best_cos", "share_of_facts", "is_candidate", "is_current",
    # on the current node's token only (what the "attach here" decision compares)
    "cur_depth", "best_aff", "best_aff_gap", "cur_aff", "best_cos", "n_aspects",
    # one-hot depth of the current node (0 .. DEPTH_BUCKETS - 1, the last one meaning "or
    # deeper"): lets a linear read learn any per-depth threshold, not only a linear one
    *(f"depth={d}" for d in range(8)),
)
DEPTH_BUCKETS = 8
STAGE2_COLUMNS: tuple[str, ...] = (
    "depth", "children", "facts", "cos_label", "cos_mean",
    # the same on every token
    "has_grandparent", "parent_facts", "parent_facts_lin", "parent_aspects", "coherence",
    "parent_share_of_grand",
    # fact tokens only
    "is_focal", "aff_parent_loo", "aff_grand_out", "promote_margin", "cos_parent_loo",
    "best_aspect_aff", "demote_margin", "best_aspect_label", "best_other_fact", "mean_other_fact",
    "aff_rest_of_parent", "best_aspect_odds", "parent_odds_in_grand",
    *(f"cluster@{c}" for c in CLUSTER_CUTS), *(f"cluster@coh+{c}" for c in RELATIVE_CUTS),
    "best_coph", "best_coph_minus_coherence",
    # one-hot count of P's fact children (1 .. FACT_BUCKETS, the last meaning "or more"):
    # "the parent is crowded" is a step in this count
    *(f"parent_facts={k}" for k in range(1, 9)),
)
FACT_BUCKETS = 8
DEMOTE_COLUMNS: tuple[str, ...] = ("aff", "aff_minus_parent_loo", "cos_label", "facts", "is_best", "gap")
GROUP_COLUMNS: tuple[str, ...] = ("cos", "coph", "coph_minus_coherence", "mutual_nearest", "parent_facts_lin",
                                  "coherence")
STAGE1_NUM = len(STAGE1_COLUMNS)
STAGE2_NUM = len(STAGE2_COLUMNS)
DEMOTE_PAIR_NUM = len(DEMOTE_COLUMNS)
GROUP_PAIR_NUM = len(GROUP_COLUMNS)
S1 = {c: i for i, c in enumerate(STAGE1_COLUMNS)}
S2 = {c: i for i, c in enumerate(STAGE2_COLUMNS)}


def _unit(x: np.ndarray) -> np.ndarray:
    """Rows scaled to unit length; zero rows stay zero."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms > 0, norms, 1.0)


def _count(n: float) -> float:
    return math.log1p(n) / COUNT_SCALE  # math, not numpy: called per token, on scalars


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
            assert node.emb_sum is not None  # a node with embedded facts below has their sum
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
    """Features of a two-layer subtree for placing ``new_fact`` (columns: STAGE1_COLUMNS).

    With ``q`` the new fact's unit embedding and ``m(n)`` a node's mean embedding:
    ``cos_mean = cos(q, m(n))``; ``aff = q . m(n)`` (the *affinity*: for unit fact
    embeddings, the mean cosine of ``q`` to the facts below ``n``; it shrinks as ``n``
    spreads out, which the cosine to the mean does not); ``best_aff``/``best_cos`` the
    largest over the child-aspect candidates and ``best_aff_gap`` the best minus the second
    best; ``share_of_facts`` the node's facts over the current node's; counts as
    log1p(count) / 5 and depths / 10. At most ``max_facts`` child facts are kept as
    context tokens, the most similar to ``q`` first.
    """
    q = np.asarray(new_fact.embedding, np.float32)
    dim = _tree_dim(tree, q)
    cur = subtree.node_id
    cands = list(subtree.candidates)
    facts = tree.child_facts(cur)
    if len(facts) > max_facts:
        fl, _ = _node_vectors(tree, facts, dim)
        sims = _unit(fl) @ _unit(q[None])[0]
        keep = np.argsort(-sims, kind="stable")[:max_facts]
        facts = [facts[i] for i in sorted(keep.tolist())]
    ids = cands + facts
    label, mean = _node_vectors(tree, ids, dim)
    qu = _unit(q[None])[0]
    cos_l = _unit(label) @ qu
    cos_m = _unit(mean) @ qu
    aff = mean @ qu
    n_c = len(cands)
    is_aspect = np.array([tree.node(c).kind == "aspect" for c in cands[1:]], bool)
    a_aff = np.where(is_aspect, aff[1:n_c], -np.inf)
    a_cos = np.where(is_aspect, cos_m[1:n_c], -np.inf)
    has_aspects = bool(is_aspect.any())
    best_aff = float(a_aff.max()) if has_aspects else 0.0
    best_cos = float(a_cos.max()) if has_aspects else 0.0
    second_aff = float(np.sort(a_aff)[-2]) if is_aspect.sum() > 1 else 0.0
    best_aff_tok = 2 + int(np.argmax(a_aff)) if has_aspects else -1
    best_cos_tok = 2 + int(np.argmax(a_cos)) if has_aspects else -1
    cur_depth = tree.depth(cur)
    cur_facts = max(tree.fact_count(cur), 1)

    T = 1 + len(ids)
    num = np.zeros((T, STAGE1_NUM), np.float32)
    kind = np.zeros(T, np.int64)
    role = np.zeros(T, np.int64)
    kind[0], role[0] = KIND_ID["new"], ROLE_ID["new"]
    num[0, S1["depth"]] = (cur_depth + 1) / DEPTH_SCALE
    num[0, S1["cos_label"]] = num[0, S1["cos_mean"]] = num[0, S1["aff"]] = 1.0
    for j, nid in enumerate(ids):
        t = j + 1
        node = tree.node(nid)
        kind[t] = KIND_ID[node.kind]
        role[t] = ROLE_ID["current"] if j == 0 else ROLE_ID["child"]
        num[t, S1["depth"]] = (cur_depth + (j > 0)) / DEPTH_SCALE
        num[t, S1["children"]] = _count(tree.graph.out_degree(nid))
        num[t, S1["facts"]] = _count(node.n_facts)
        num[t, S1["share_of_facts"]] = node.n_facts / cur_facts
        num[t, S1["is_candidate"]] = float(j < n_c)
    num[1:, S1["cos_label"]] = cos_l
    num[1:, S1["cos_mean"]] = cos_m
    num[1:, S1["aff"]] = aff
    if has_aspects:
        num[1:, S1["aff_minus_best"]] = aff - best_aff
        num[1:, S1["cos_minus_best"]] = cos_m - best_cos
        num[best_aff_tok, S1["is_best_aff"]] = 1.0
        num[best_cos_tok, S1["is_best_cos"]] = 1.0
    # The "attach here" quantities go on the current node's token only: candidate logits
    # are compared with each other, so a value shared by all tokens would cancel out.
    num[1, S1["is_current"]] = 1.0
    num[1, S1["cur_depth"]] = cur_depth / DEPTH_SCALE
    num[1, S1[f"depth={min(cur_depth, DEPTH_BUCKETS - 1)}"]] = 1.0
    num[1, S1["best_aff"]] = best_aff
    num[1, S1["best_aff_gap"]] = best_aff - second_aff if has_aspects else 0.0
    num[1, S1["cur_aff"]] = aff[0]
    num[1, S1["best_cos"]] = best_cos
    num[1, S1["n_aspects"]] = _count(int(is_aspect.sum()))
    label = np.concatenate([q[None], label])
    mean = np.concatenate([q[None], mean])
    return Stage1Features(label, mean, kind, role, num, n_c)


ATTACH_HERE_COLUMNS: tuple[str, ...] = (
    "best_aff", "best_aff_gap", "cur_aff", "best_cos", "n_aspects", "rest_aff", "best_minus_rest",
    "best_odds", *(f"depth={d}" for d in range(DEPTH_BUCKETS)),
)


def attach_here_row(feats: Stage1Features) -> np.ndarray:
    """The quantities of one "attach here or go down" question, read off a level's features
    (columns: ATTACH_HERE_COLUMNS): the current node's "attach here" columns and, with ``A``
    the child aspect of highest affinity and ``c`` the current node,

    - ``rest_aff`` = ``a(f, c minus A)``, the affinity of the new fact to the facts below
      ``c`` but not below ``A`` (from ``cur_aff``, ``best_aff`` and A's share ``s`` of c's
      facts: ``(cur_aff - s * best_aff) / (1 - s)``; ``cur_aff`` when nothing is beside A);
    - ``best_minus_rest`` = ``best_aff - rest_aff``: does the fact fit A better than the rest;
    - ``best_odds`` = ``s / (1 - s)`` over 10, capped at 2: how much of ``c`` A holds.

    An embedding teacher stops where the best child does not fit clearly better than the
    rest, by a margin that grows with its size; these columns make such a rule linear.
    """
    num = feats.num
    cur = num[1]
    best_tok = int(np.argmax(num[:, S1["is_best_aff"]]))
    has_best = num[best_tok, S1["is_best_aff"]] > 0
    share = min(float(num[best_tok, S1["share_of_facts"]]), 1.0) if has_best else 0.0
    best, here = float(cur[S1["best_aff"]]), float(cur[S1["cur_aff"]])
    rest = (here - share * best) / (1.0 - share) if share < 0.999 else here
    odds = min(share / (1.0 - share), 20.0) if share < 0.999 else 20.0
    depth = [float(cur[S1[f"depth={d}"]]) for d in range(DEPTH_BUCKETS)]
    return np.array([best, float(cur[S1["best_aff_gap"]]), here, float(cur[S1["best_cos"]]),
                     float(cur[S1["n_aspects"]]), rest, best - rest, odds / 10.0, *depth], np.float64)


# ----------------------------------------------------------------------------- stage 2
@dataclass(frozen=True)
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
    can_group: bool = True  # the tree has room for a new aspect under the parent (max_height)

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
        mask[:, 3] = n >= 2 and self.can_group
        return mask


def _cophenetic_similarity(unit_vecs: np.ndarray) -> np.ndarray:
    """(n, n) cophenetic similarity of average-linkage clustering on ``1 - cos``; the
    diagonal is 1. Read directly off the merge list (``scipy``'s ``cophenet`` re-validates
    the linkage, which costs more than the clustering at these sizes)."""
    n = unit_vecs.shape[0]
    out = np.ones((n, n), np.float32)
    if n < 2:
        return out
    sims = np.clip(unit_vecs @ unit_vecs.T, -1.0, 1.0)
    dist = np.maximum(1.0 - sims[np.triu_indices(n, 1)], 0.0).astype(np.float64)
    from scipy.cluster.hierarchy import linkage  # slow to import: only where a closure has facts to cluster

    z = linkage(dist, method="average")
    members = [np.array([i]) for i in range(n)]
    for a, b, height, _ in z:
        left, right = members[int(a)], members[int(b)]
        sim = 1.0 - height
        out[left[:, None], right] = sim
        out[right[:, None], left] = sim
        members.append(np.concatenate((left, right)))
    return out


def stage2_features(tree: MembrainTree, closure: Closure, *, max_facts: int = 48,
                    max_aspects: int = 24, max_uncles: int = 24) -> Stage2Features:
    """Features of a closure (README, Concepts: the closure) for the stage-2 decision.

    Tokens: focal fact, sibling facts, sibling aspects, parent, uncles, grandparent. Very
    crowded parents keep the ``max_facts`` sibling facts (``max_aspects`` aspects,
    ``max_uncles`` uncles) most similar to the focal fact; clustering always uses all of
    the parent's facts.

    Columns (STAGE2_COLUMNS), with ``e`` a fact's unit embedding, ``q`` the focal fact's,
    ``P`` the parent, ``G`` the grandparent, ``S(X)``/``n(X)`` the embedding sum/count of
    the facts below ``X``, are defined by the functions that write them: every token's own
    (:func:`_node_columns`), the closure's, the same on every token
    (:func:`_closure_columns`), and on fact tokens what a Promote (:func:`_promotion_columns`),
    a Demote (:func:`_aspect_columns`) and a Group (:func:`_cluster_columns`) compare. Sizes
    weigh against similarities where a teacher balances a tree (``aff_rest_of_parent``,
    ``best_aspect_odds``, ``parent_odds_in_grand``). Demote pairs (fact, aspect):
    :func:`_demote_pairs`; group pairs (fact, fact): :func:`_group_pairs`.
    """
    focal, parent, gp = closure.fact_id, closure.parent_id, closure.grandparent_id
    dim = _tree_dim(tree)
    q = _unit(_vec(tree.node(focal).embedding, dim)[None])[0]
    pf = _parent_facts(tree, closure, dim)
    all_aspects = tree.child_aspects(parent)
    uncles = [m.node_id for m in closure.members if m.role == "uncle"]

    keep_f = _most_similar(tree, pf.ids, max_facts, q, dim, keep_first=True)
    facts = [pf.ids[i] for i in keep_f]
    keep_a = _most_similar(tree, all_aspects, max_aspects, q, dim)
    aspects = [all_aspects[i] for i in keep_a]
    uncles = [uncles[i] for i in _most_similar(tree, uncles, max_uncles, q, dim)]

    ids = facts + aspects + [parent] + uncles + ([gp] if gp else [])
    roles = (["self"] + ["sibling"] * (len(facts) - 1 + len(aspects)) + ["parent"]
             + ["uncle"] * len(uncles) + (["grandparent"] if gp else []))
    label, mean = _node_vectors(tree, ids, dim)
    num = np.zeros((len(ids), STAGE2_NUM), np.float32)
    kind = np.array([KIND_ID[tree.node(i).kind] for i in ids], np.int64)
    role = np.array([ROLE_ID[r] for r in roles], np.int64)
    _node_columns(num, tree, parent, ids, roles, label, mean, q)
    _closure_columns(num, tree, closure, pf, len(all_aspects))

    # Fact quantities, for every fact of the parent (the kept ones are copied to tokens).
    kf = np.array(keep_f, np.int64)
    aff_p, cos_p = _leave_one_out(tree, parent, pf)
    a_label, a_mean = _node_vectors(tree, all_aspects, dim)
    a_aff = pf.unit @ a_mean.T  # (F, A)
    a_lcos = pf.unit @ _unit(a_label).T
    _promotion_columns(num, tree, closure, pf, kf, aff_p, cos_p)
    _aspect_columns(num, tree, parent, all_aspects, pf, kf, aff_p, a_aff, a_lcos, dim)
    _cluster_columns(num, pf, kf)

    n_f = len(kf)
    fact_tok = np.arange(n_f, dtype=np.int64)
    aspect_tok = np.arange(n_f, n_f + len(aspects), dtype=np.int64)
    demote = _demote_pairs(tree, aspects, kf, np.array(keep_a, np.int64), aff_p, a_aff, a_lcos)
    group = _group_pairs(pf, kf)
    return Stage2Features(label, mean, kind, role, num, ids, fact_tok, aspect_tok, demote, group,
                          focal, parent, gp, tree.has_room(parent, 2))


@dataclass
class _ParentFacts:
    """All the fact children of a closure's parent ``P``, the focal fact first: clustering
    and the per-fact quantities use every one of them, however many are kept as tokens."""

    ids: list[str]
    label: np.ndarray  # (F, dim) their stored embeddings (zeros where none)
    unit: np.ndarray  # (F, dim) the same as unit vectors
    sims: np.ndarray  # (F, F) pairwise cosines
    others: np.ndarray  # ``sims`` with the diagonal lowered by 3: a row's max is its nearest *other* fact
    coph: np.ndarray  # (F, F) cophenetic similarity (:func:`_cophenetic_similarity`)
    coherence: float  # mean pairwise cosine (1 for a lone fact)

    @property
    def n(self) -> int:
        return len(self.ids)


def _parent_facts(tree: MembrainTree, closure: Closure, dim: int) -> _ParentFacts:
    focal = closure.fact_id
    ids = [focal] + [c for c in tree.child_facts(closure.parent_id) if c != focal]
    label, _ = _node_vectors(tree, ids, dim)
    unit = _unit(label)
    sims = unit @ unit.T
    coph = _cophenetic_similarity(unit)
    n = len(ids)
    coherence = float((sims.sum() - n) / (n * (n - 1))) if n > 1 else 1.0
    others = sims - np.eye(n) * 3.0
    return _ParentFacts(ids, label, unit, sims, others, coph, coherence)


def _most_similar(tree: MembrainTree, ids: list[str], k: int, q: np.ndarray, dim: int, *,
                  keep_first: bool = False) -> list[int]:
    """Indices, in order, of the ``k`` of ``ids`` whose mean embedding has the largest
    cosine to ``q`` (all of them when there are at most ``k``); ``keep_first``: the first
    (the focal fact) is always among them."""
    if len(ids) <= k:
        return list(range(len(ids)))
    _, m = _node_vectors(tree, ids, dim)
    s = _unit(m) @ q
    if keep_first:
        s[0] = np.inf
    return sorted(np.argsort(-s, kind="stable")[:k].tolist())


def _node_columns(num: np.ndarray, tree: MembrainTree, parent: str, ids: list[str], roles: list[str],
                  label: np.ndarray, mean: np.ndarray, q: np.ndarray) -> None:
    """Every token's own columns: ``depth`` (/ 10, by role: the parent's depth ``d`` for
    the parent and uncles, ``d + 1`` for the facts and aspects below it, ``d - 1`` for the
    grandparent), ``children`` and ``facts`` (log counts), ``cos_label = cos(q, label)``
    and ``cos_mean = cos(q, m(node))``."""
    depth_p = tree.depth(parent)
    depth_of = {"self": depth_p + 1, "sibling": depth_p + 1, "parent": depth_p, "uncle": depth_p,
                "grandparent": depth_p - 1}
    for t, nid in enumerate(ids):
        node = tree.node(nid)
        num[t, S2["depth"]] = depth_of[roles[t]] / DEPTH_SCALE
        num[t, S2["children"]] = _count(tree.graph.out_degree(nid))
        num[t, S2["facts"]] = _count(node.n_facts)
    num[:, S2["cos_label"]] = _unit(label) @ q
    num[:, S2["cos_mean"]] = _unit(mean) @ q


def _closure_columns(num: np.ndarray, tree: MembrainTree, closure: Closure, pf: _ParentFacts,
                     n_aspects: int) -> None:
    """The closure's columns, the same on every token: ``has_grandparent``;
    ``parent_facts`` and ``parent_aspects`` (log counts of P's fact and aspect children),
    ``parent_facts_lin`` (the fact count / 10) and its one-hot ``parent_facts=k``;
    ``coherence``; ``parent_share_of_grand = n(P) / n(G)`` (0 without G)."""
    gp = closure.grandparent_id
    num[:, S2["has_grandparent"]] = float(gp is not None)
    num[:, S2["parent_facts"]] = _count(pf.n)
    num[:, S2["parent_facts_lin"]] = pf.n / 10.0
    num[:, S2["parent_aspects"]] = _count(n_aspects)
    num[:, S2["coherence"]] = pf.coherence
    g_cnt = tree.node(gp).emb_count if gp is not None else 0
    if g_cnt:
        num[:, S2["parent_share_of_grand"]] = tree.node(closure.parent_id).emb_count / g_cnt
    num[:, S2[f"parent_facts={min(pf.n, FACT_BUCKETS)}"]] = 1.0


def _leave_one_out(tree: MembrainTree, parent: str, pf: _ParentFacts) -> tuple[np.ndarray, np.ndarray]:
    """(F,) each fact's affinity to P's other facts, ``e . (S(P) - x) / (n(P) - 1)`` with
    ``x`` its raw embedding (what the sums hold), and the cosine form (divided by
    ``|S(P) - x| / (n(P) - 1)``); 0 for a fact without embedding or alone in P."""
    pnode = tree.node(parent)
    p_sum, p_cnt = pnode.emb_sum, pnode.emb_count
    aff_p = np.zeros(pf.n)
    cos_p = np.zeros(pf.n)
    if p_sum is not None and p_cnt > 1:
        rest = (p_sum[None, :] - pf.label) / (p_cnt - 1)  # (F, dim); facts without embedding: unused
        aff_p = np.einsum("ij,ij->i", pf.unit, rest)
        cos_p = aff_p / np.maximum(np.linalg.norm(rest, axis=1), 1e-12)
        has = np.linalg.norm(pf.label, axis=1) > 0
        aff_p, cos_p = np.where(has, aff_p, 0.0), np.where(has, cos_p, 0.0)
    return aff_p, cos_p


def _promotion_columns(num: np.ndarray, tree: MembrainTree, closure: Closure, pf: _ParentFacts, kf: np.ndarray,
                       aff_p: np.ndarray, cos_p: np.ndarray) -> None:
    """Fact tokens (the first ``len(kf)``), what a Promote compares: ``is_focal``;
    ``aff_parent_loo`` and ``cos_parent_loo`` (:func:`_leave_one_out`); ``aff_grand_out =
    e . (S(G) - S(P)) / (n(G) - n(P))`` (to the facts of G outside P; 0 without them) and
    ``promote_margin`` = that minus ``aff_parent_loo``; ``parent_odds_in_grand = (n(P) - 1)
    / (n(G) - n(P))``, clipped at 20 and divided by 20."""
    gp = closure.grandparent_id
    pnode = tree.node(closure.parent_id)
    p_sum, p_cnt = pnode.emb_sum, pnode.emb_count
    g_out = None
    g_cnt = 0
    if gp is not None:
        gnode = tree.node(gp)
        g_cnt = gnode.emb_count
        if gnode.emb_count > p_cnt:
            assert gnode.emb_sum is not None  # a node with embedded facts below has their sum
            g_out = (gnode.emb_sum - (p_sum if p_sum is not None else 0.0)) / (gnode.emb_count - p_cnt)
    aff_g = pf.unit @ g_out if g_out is not None else np.zeros(pf.n)
    n_f = len(kf)  # facts are the first n_f tokens
    num[0, S2["is_focal"]] = 1.0
    num[:n_f, S2["aff_parent_loo"]] = aff_p[kf]
    num[:n_f, S2["aff_grand_out"]] = aff_g[kf]
    if g_out is not None:
        num[:n_f, S2["promote_margin"]] = aff_g[kf] - aff_p[kf]
    num[:n_f, S2["cos_parent_loo"]] = cos_p[kf]
    if g_cnt > p_cnt:
        num[:n_f, S2["parent_odds_in_grand"]] = min((p_cnt - 1) / (g_cnt - p_cnt), 20.0) / 20.0


def _aspect_columns(num: np.ndarray, tree: MembrainTree, parent: str, all_aspects: list[str], pf: _ParentFacts,
                    kf: np.ndarray, aff_p: np.ndarray, a_aff: np.ndarray, a_lcos: np.ndarray, dim: int) -> None:
    """Fact tokens, what a Demote compares (0 when P has no child aspect):
    ``best_aspect_aff`` = max over P's child aspects A of ``e . m(A)`` (``a_aff``);
    ``demote_margin`` = that minus ``aff_parent_loo``; ``best_aspect_label`` the best cosine
    to an aspect label (``a_lcos``); with ``B`` the fact's best aspect,
    ``aff_rest_of_parent = e . (S(P) - S(B) - e) / (n(P) - n(B) - 1)`` (0 when nothing is
    left) and ``best_aspect_odds = n(B) / (n(P) - n(B) - 1)``, clipped at 20 and divided
    by 20."""
    if not all_aspects:
        return
    n_f = len(kf)
    best_aff = a_aff[kf].max(axis=1)
    num[:n_f, S2["best_aspect_aff"]] = best_aff
    num[:n_f, S2["demote_margin"]] = best_aff - aff_p[kf]
    num[:n_f, S2["best_aspect_label"]] = a_lcos[kf].max(axis=1)
    pnode = tree.node(parent)
    p_sum, p_cnt = pnode.emb_sum, pnode.emb_count
    if p_sum is None:
        return
    best = np.argmax(a_aff[kf], axis=1)
    a_nodes = [tree.node(a) for a in all_aspects]
    a_cnt = np.array([n.emb_count for n in a_nodes], np.float64)
    a_sum = np.stack([n.emb_sum if n.emb_sum is not None else np.zeros(dim) for n in a_nodes])
    rest_cnt = p_cnt - a_cnt[best] - 1
    rest = (p_sum[None, :] - a_sum[best] - pf.label[kf]) / np.maximum(rest_cnt, 1)[:, None]
    num[:n_f, S2["aff_rest_of_parent"]] = np.where(rest_cnt > 0, np.einsum("ij,ij->i", pf.unit[kf], rest), 0.0)
    num[:n_f, S2["best_aspect_odds"]] = np.minimum(a_cnt[best] / np.maximum(rest_cnt, 1), 20.0) / 20.0


def _cluster_columns(num: np.ndarray, pf: _ParentFacts, kf: np.ndarray) -> None:
    """Fact tokens, what a Group compares: ``best_other_fact``/``mean_other_fact`` (the
    max/mean cosine to P's other facts; 0 for a lone fact); ``cluster@c`` = log1p of the
    size of the fact's average-linkage cluster among P's facts cut at similarity ``c``
    (/ 5), and ``cluster@coh+c`` the same cut at ``coherence + c``; ``best_coph`` the
    largest cophenetic similarity to another fact of P (where the fact first joins a
    cluster) and that minus ``coherence``."""
    n_f, n_all = len(kf), pf.n
    cuts = list(CLUSTER_CUTS) + [pf.coherence + c for c in RELATIVE_CUTS]
    sizes = np.stack([(pf.coph >= c - 1e-9).sum(1) for c in cuts], axis=1)  # (F, cuts)
    c0 = S2["cluster@" + str(CLUSTER_CUTS[0])]
    if n_all > 1:
        num[:n_f, S2["best_other_fact"]] = pf.others[kf].max(axis=1)
        num[:n_f, S2["mean_other_fact"]] = (pf.sims[kf].sum(axis=1) - 1.0) / (n_all - 1)
    num[:n_f, c0:c0 + len(cuts)] = np.log1p(sizes[kf]) / COUNT_SCALE
    if n_all > 1:
        # the similarity at which the fact first joins another (its cophenetic nearest)
        best_coph = (pf.coph - np.eye(n_all, dtype=pf.coph.dtype) * 3.0).max(axis=1)
        num[:n_f, S2["best_coph"]] = best_coph[kf]
        num[:n_f, S2["best_coph_minus_coherence"]] = best_coph[kf] - pf.coherence


def _demote_pairs(tree: MembrainTree, aspects: list[str], kf: np.ndarray, ka: np.ndarray, aff_p: np.ndarray,
                  a_aff: np.ndarray, a_lcos: np.ndarray) -> np.ndarray:
    """(N, A, DEMOTE_PAIR_NUM) for each kept fact and kept aspect A: ``e . m(A)``, that
    minus ``aff_parent_loo``, cos to A's label, log1p facts of A, is the fact's best
    aspect, best minus second best (for the best) or own minus best (others)."""
    n_f, n_a = len(kf), len(aspects)
    demote = np.zeros((n_f, n_a, DEMOTE_PAIR_NUM), np.float32)
    if n_a:
        s = a_aff[np.ix_(kf, ka)]
        srt = np.sort(s, axis=1)
        best = srt[:, -1:]
        second = srt[:, -2:-1] if n_a > 1 else np.zeros_like(best)
        is_best = s >= best
        demote[..., 0] = s
        demote[..., 1] = s - aff_p[kf][:, None]
        demote[..., 2] = a_lcos[np.ix_(kf, ka)]
        demote[..., 3] = np.array([_count(tree.node(a).n_facts) for a in aspects], np.float32)[None]
        demote[..., 4] = is_best
        demote[..., 5] = np.where(is_best, best - second, s - best)
    return demote


def _group_pairs(pf: _ParentFacts, kf: np.ndarray) -> np.ndarray:
    """(N, N, GROUP_PAIR_NUM) for each pair of kept facts: cosine, cophenetic similarity,
    that minus ``coherence``, mutual nearest facts, P's fact count / 10, ``coherence``."""
    n_f = len(kf)
    group = np.zeros((n_f, n_f, GROUP_PAIR_NUM), np.float32)
    if n_f > 1:
        nearest = np.argmax(pf.others, axis=1)
        group[..., 0] = pf.sims[np.ix_(kf, kf)]
        group[..., 1] = pf.coph[np.ix_(kf, kf)]
        group[..., 2] = pf.coph[np.ix_(kf, kf)] - pf.coherence
        group[..., 3] = (nearest[kf][:, None] == kf[None, :]) & (nearest[kf][None, :] == kf[:, None])
        group[..., 4] = pf.n / 10.0
        group[..., 5] = pf.coherence
    return group
