"""Structured decoding: stage-2 logits -> a valid, conflict-free, ordered action series.

The stage-2 network scores each actable fact ``i`` (the focal fact and its sibling facts)
separately; a tree edit is a joint choice. The decoder is a small planning step over
these potentials (README, Concepts: stage 2):

- **Unary potentials**: ``gain[i, t] = log p(t | i) - log p(idle | i) - idle_margin`` for
  t in {promote, demote, group}, from the action-type logits. Idle has gain 0, so an action
  is taken only when it beats Idle by the margin (in nats).
- **Demote target**: the argmax of the fact's demote-target logits over the sibling aspects.
- **Pairwise potentials**: the group logits ``w[i, j]`` (log-odds that i and j belong in one
  new aspect). Groups are built by greedy average-linkage agglomeration among the facts
  whose group gain is positive: repeatedly merge the two clusters with the highest mean
  ``w`` between them while it exceeds ``link_threshold``. This maximises within-group
  affinity greedily; clusters of two or more facts are the candidate groups.
- **Hard constraints**: one action per fact (each takes its best positive-gain option);
  Promote needs a grandparent, Demote a sibling aspect, a Group at least two facts of one
  parent. A group that loses members below two is dissolved and its members re-choose
  without it, until nothing changes.

Every chosen action is validated against the tree (``validate_action``); the order is
Demotes, Promotes, then Groups. The actions touch disjoint facts and none removes a
Demote target, so each stays valid when the series is applied in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InvalidOperationError
from ..tree.actions import DEMOTE, GROUP, IDLE, PROMOTE, Action, Demote, Group, Promote, validate_action
from ..tree.tree import MembrainTree
from .features import Stage2Features


@dataclass(frozen=True)
class DecodeConfig:
    """``idle_margin``: nats by which an action's log-probability must exceed Idle's;
    ``link_threshold``: the mean pairwise group logit two clusters need to merge (0 means
    "more likely together than apart")."""

    idle_margin: float = 0.0
    link_threshold: float = 0.0


def _log_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    return x - np.log(np.exp(x).sum(axis=-1, keepdims=True))


def agglomerate(affinity: np.ndarray, members: list[int], threshold: float) -> list[list[int]]:
    """Greedy average-linkage clustering of ``members`` on a symmetric ``affinity`` matrix:
    merge the pair of clusters with the highest mean affinity while it is > ``threshold``
    (the first such pair, clusters in order, among equals; a merged cluster takes the
    first one's place). The sums of affinity between clusters are kept and merged, so each
    merge costs one pass over the pairs, not a mean per pair."""
    clusters = [[m] for m in members]
    if len(clusters) < 2:
        return clusters
    index = np.asarray(members)
    sums = np.asarray(affinity, dtype=np.float64)[np.ix_(index, index)]
    sizes = np.ones(len(clusters))
    while len(clusters) > 1:
        k = len(clusters)
        means = sums / np.outer(sizes, sizes)
        means[np.tril_indices(k)] = -np.inf
        a, b = divmod(int(np.argmax(means)), k)
        if not means[a, b] > threshold:
            break
        clusters[a] = clusters[a] + clusters[b]
        del clusters[b]
        sums[a, :] += sums[b, :]
        sums[:, a] += sums[:, b]
        sums = np.delete(np.delete(sums, b, axis=0), b, axis=1)
        sizes[a] += sizes[b]
        sizes = np.delete(sizes, b)
    return clusters


def decode(tree: MembrainTree, feats: Stage2Features, type_logits: np.ndarray, demote_logits: np.ndarray,
           group_logits: np.ndarray, config: DecodeConfig | None = None) -> list[Action]:
    """Turn one closure's stage-2 logits into an ordered, valid action series.

    Args:
        type_logits: (N, 4) over idle/promote/demote/group for ``feats.fact_ids``.
        demote_logits: (N, A) over ``feats.aspect_ids``.
        group_logits: (N, N) pairwise group logits (only the upper/lower pair is used).
    Extra rows or columns (batch padding) are ignored.
    """
    cfg = config or DecodeConfig()
    facts, aspects = feats.fact_ids, feats.aspect_ids
    n, a = len(facts), len(aspects)
    if n == 0:
        return []
    tl = np.array(type_logits[:n], dtype=np.float64)
    tl[~feats.type_mask()] = -np.inf
    logp = _log_softmax(tl)
    gain = logp - logp[:, [IDLE]] - cfg.idle_margin
    gain[:, IDLE] = 0.0
    gain[~np.isfinite(gain)] = -np.inf
    target = np.argmax(np.asarray(demote_logits)[:n, :a], axis=1) if a else np.zeros(n, int)
    w = np.asarray(group_logits, dtype=np.float64)[:n, :n]
    w = (w + w.T) / 2  # the decoder treats affinity as symmetric whatever the network gave

    in_group: dict[int, int] = {}  # fact -> cluster id, for clusters of size >= 2
    clusters: list[list[int]] = []
    banned_group: set[int] = set()
    choice = np.zeros(n, int)
    for _ in range(n + 1):
        cands = [i for i in range(n) if gain[i, GROUP] > 0 and i not in banned_group]
        clusters = [c for c in agglomerate(w, cands, cfg.link_threshold) if len(c) >= 2]
        in_group = {i: k for k, c in enumerate(clusters) for i in c}
        for i in range(n):
            options = gain[i].copy()
            if i not in in_group:
                options[GROUP] = -np.inf
            choice[i] = int(np.argmax(options)) if options.max() > 0 else IDLE
        # A fact that prefers Promote/Demote leaves its group; a group left with fewer than
        # two members is dissolved and its members choose again without grouping.
        changed = False
        for c in clusters:
            stay = [i for i in c if choice[i] == GROUP]
            if len(stay) < 2:
                banned_group.update(c)
                changed = True
        if not changed:
            break
    clusters = [[i for i in c if choice[i] == GROUP] for c in clusters]

    actions: list[Action] = []
    for i in range(n):
        if choice[i] == DEMOTE and a:
            actions.append(Demote(facts[i], aspects[int(target[i])]))
    for i in range(n):
        if choice[i] == PROMOTE:
            actions.append(Promote(facts[i]))
    for c in clusters:
        if len(c) >= 2:
            actions.append(Group(tuple(facts[i] for i in sorted(c))))
    valid = []
    for act in actions:
        try:
            validate_action(tree, act)
        except (InvalidOperationError, KeyError, ValueError):
            continue  # the tree changed since the features were taken: drop, never apply
        valid.append(act)
    return valid


@dataclass
class Stage2Labels:
    """A teacher's action series expressed on one closure's facts: ``types`` (N,) in
    idle/promote/demote/group, ``targets`` (N,) the demote target's aspect index or -1,
    ``together`` (N, N) 1 where both facts are in one teacher Group; ``ignored`` counts
    teacher actions on nodes the features do not show as actable."""

    types: np.ndarray
    targets: np.ndarray
    together: np.ndarray
    ignored: int = 0


def encode_actions(feats: Stage2Features, actions: list[Action]) -> Stage2Labels:
    """The inverse of :func:`decode`: labels for training on a teacher's action series."""
    index = {f: i for i, f in enumerate(feats.fact_ids)}
    a_index = {x: j for j, x in enumerate(feats.aspect_ids)}
    n = len(index)
    types = np.zeros(n, np.int64)
    targets = np.full(n, -1, np.int64)
    together = np.zeros((n, n), np.float32)
    ignored = 0
    for act in actions:
        if isinstance(act, Promote) and act.node_id in index:
            types[index[act.node_id]] = PROMOTE
        elif isinstance(act, Demote) and act.node_id in index and act.target_id in a_index:
            i = index[act.node_id]
            types[i], targets[i] = DEMOTE, a_index[act.target_id]
        elif isinstance(act, Group) and all(x in index for x in act.node_ids):
            idx = [index[x] for x in act.node_ids]
            types[idx] = GROUP
            together[np.ix_(idx, idx)] = 1.0
        else:
            ignored += 1
    # An action the features rule out (a Group where the tree has no room left) is not a
    # label the network can learn: it trains as Idle and is counted as ignored.
    impossible = ~feats.type_mask()[np.arange(n), types]
    if impossible.any():
        types[impossible], targets[impossible] = IDLE, -1
        together[impossible, :] = 0.0
        together[:, impossible] = 0.0
        ignored += int(impossible.sum())
    np.fill_diagonal(together, 0.0)
    return Stage2Labels(types, targets, together, ignored)


def action_key(action: Action) -> tuple:
    """A hashable identity of an action that ignores a Group's label and member order."""
    if isinstance(action, Promote):
        return ("promote", action.node_id)
    if isinstance(action, Demote):
        return ("demote", action.node_id, action.target_id)
    return ("group", frozenset(action.node_ids))
