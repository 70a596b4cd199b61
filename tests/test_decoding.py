"""Structured decoding: any logits on any closure give a series that applies cleanly."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from langchain_membrain.students.decoding import DecodeConfig, action_key, agglomerate, decode, encode_actions
from langchain_membrain.students.features import stage2_features
from langchain_membrain.tree.actions import Demote, Group, Promote, apply_actions
from langchain_membrain.tree.tree import MembrainTree

DIM = 8


def random_tree(rng: np.random.Generator, n_aspects: int, n_facts: int) -> MembrainTree:
    """Aspects hung under random earlier containers, then facts under random containers."""
    tree = MembrainTree("s", dim=DIM)
    containers = [tree.root_id]
    for i in range(n_aspects):
        containers.append(tree.add_aspect(containers[rng.integers(len(containers))], f"a{i}"))
    for i in range(n_facts):
        v = rng.normal(size=DIM)
        tree.add_fact(containers[rng.integers(len(containers))], f"f{i}", embedding=v / np.linalg.norm(v))
    # empty aspects are legal but uninteresting; give each one fact so means exist
    for a in tree.aspects():
        if tree.fact_count(a) == 0:
            v = rng.normal(size=DIM)
            tree.add_fact(a, "filler", embedding=v / np.linalg.norm(v))
    return tree


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**31 - 1), n_aspects=st.integers(0, 6), n_facts=st.integers(1, 14),
       scale=st.sampled_from([0.1, 1.0, 5.0, 30.0]), margin=st.sampled_from([0.0, 0.5, 2.0]))
def test_decoded_series_always_applies(seed, n_aspects, n_facts, scale, margin):
    rng = np.random.default_rng(seed)
    tree = random_tree(rng, n_aspects, n_facts)
    fact = tree.facts()[rng.integers(len(tree.facts()))]
    feats = stage2_features(tree, tree.closure(fact))
    n, a = len(feats.fact_ids), len(feats.aspect_ids)
    type_logits = rng.normal(size=(n, 4)) * scale
    demote_logits = rng.normal(size=(n, a)) * scale
    group_logits = rng.normal(size=(n, n)) * scale
    actions = decode(tree, feats, type_logits, demote_logits, group_logits, DecodeConfig(idle_margin=margin))

    touched = [x for act in actions for x in (act.node_ids if isinstance(act, Group) else [act.node_id])]
    assert len(touched) == len(set(touched)), "one action per fact"
    assert set(touched) <= set(feats.fact_ids)
    for act in actions:
        if isinstance(act, Group):
            assert len(act.node_ids) >= 2
        if isinstance(act, Promote):
            assert feats.can_promote
    n_facts_before = len(tree.facts())
    applied, skipped = apply_actions(tree, actions, name_aspect=lambda texts: "g")
    assert skipped == []
    assert len(applied) == len(actions)
    assert len(tree.facts()) == n_facts_before
    tree.check_invariants()


def _two_cluster_tree():
    """root -> p (aspect) -> facts x1, x2 (similar), y (different), aspect t; root -> u."""
    tree = MembrainTree("s", dim=DIM)
    p = tree.add_aspect(tree.root_id, "p")
    e = np.eye(DIM, dtype=np.float32)
    x1 = tree.add_fact(p, "x1", embedding=e[0])
    x2 = tree.add_fact(p, "x2", embedding=(e[0] + 0.1 * e[1]) / np.linalg.norm(e[0] + 0.1 * e[1]))
    y = tree.add_fact(p, "y", embedding=e[2])
    t = tree.add_aspect(p, "t")
    tree.add_fact(t, "t0", embedding=e[3])
    u = tree.add_aspect(tree.root_id, "u")
    tree.add_fact(u, "u0", embedding=e[4])
    return tree, dict(p=p, x1=x1, x2=x2, y=y, t=t)


def test_decode_builds_group_demote_promote():
    tree, ids = _two_cluster_tree()
    feats = stage2_features(tree, tree.closure(ids["x1"]))
    assert feats.fact_ids == [ids["x1"], ids["x2"], ids["y"]]
    type_logits = np.array([[0, -5, -5, 3], [0, -5, -5, 3], [0, -5, 4, -5]], float)
    demote = np.array([[0.0], [0.0], [2.0]])
    group = np.full((3, 3), -4.0)
    group[0, 1] = group[1, 0] = 4.0
    actions = decode(tree, feats, type_logits, demote, group)
    assert {action_key(a) for a in actions} == {("group", frozenset({ids["x1"], ids["x2"]})),
                                                ("demote", ids["y"], ids["t"])}
    # Demotes come before Groups in the series.
    assert isinstance(actions[0], Demote) and isinstance(actions[-1], Group)

    type_logits = np.array([[0, 3, -5, -5], [0, -5, -5, -5], [0, -5, -5, -5]], float)
    assert decode(tree, feats, type_logits, demote, group) == [Promote(ids["x1"])]


def test_idle_margin_and_dissolved_groups():
    tree, ids = _two_cluster_tree()
    feats = stage2_features(tree, tree.closure(ids["x1"]))
    demote = np.zeros((3, 1))
    group = np.full((3, 3), 4.0)
    # promote beats idle by log(e^1) = 1 nat: taken with margin 0.5, not with margin 1.5
    type_logits = np.array([[0, 1, -9, -9], [0, -9, -9, -9], [0, -9, -9, -9]], float)
    assert decode(tree, feats, type_logits, demote, group, DecodeConfig(idle_margin=0.5)) == [Promote(ids["x1"])]
    assert decode(tree, feats, type_logits, demote, group, DecodeConfig(idle_margin=1.5)) == []
    # Only one fact wants Group: a group of one is dissolved, nothing is grouped.
    type_logits = np.array([[0, -9, -9, 3], [0, -9, -9, -9], [0, -9, -9, -9]], float)
    assert decode(tree, feats, type_logits, demote, group) == []
    # x1 prefers Promote over Group: the remaining x2, y still form a group.
    type_logits = np.array([[0, 5, -9, 3], [0, -9, -9, 3], [0, -9, -9, 3]], float)
    keys = {action_key(a) for a in decode(tree, feats, type_logits, demote, group)}
    assert keys == {("promote", ids["x1"]), ("group", frozenset({ids["x2"], ids["y"]}))}


def test_encode_actions_is_the_inverse_of_decode():
    tree, ids = _two_cluster_tree()
    feats = stage2_features(tree, tree.closure(ids["x1"]))
    series = [Group((ids["x1"], ids["x2"])), Demote(ids["y"], ids["t"]), Promote("not-in-closure")]
    lab = encode_actions(feats, series)
    assert lab.types.tolist() == [3, 3, 2]
    assert lab.targets.tolist() == [-1, -1, 0]
    assert lab.together[0, 1] == lab.together[1, 0] == 1.0 and lab.together[0, 2] == 0.0
    assert lab.ignored == 1
    # decoding the labels as near-certain logits gives the same series back
    t = np.full((3, 4), -9.0)
    t[np.arange(3), lab.types] = 9.0
    d = np.where(np.arange(1)[None] == lab.targets[:, None], 9.0, -9.0)
    g = np.where(lab.together > 0, 9.0, -9.0)
    out = decode(tree, feats, t, d, g)
    assert {action_key(a) for a in out} == {action_key(a) for a in series[:2]}


def test_no_group_where_the_tree_has_no_room():
    """Under a height bound that leaves no room below p, Group is masked for the student,
    dropped from a decoded series, and a teacher's Group there trains as Idle."""
    tree, ids = _two_cluster_tree()
    tree.max_height = 2  # p is at depth 1: a new aspect under it would hold facts at depth 3
    feats = stage2_features(tree, tree.closure(ids["x1"]))
    assert not feats.type_mask()[:, 3].any() and feats.type_mask()[:, 2].all()
    t = np.array([[0, -5, -5, 9], [0, -5, -5, 9], [0, -5, -5, 9]], float)
    assert decode(tree, feats, t, np.zeros((3, 1)), np.full((3, 3), 9.0)) == []
    lab = encode_actions(feats, [Group((ids["x1"], ids["x2"])), Demote(ids["y"], ids["t"])])
    assert lab.types.tolist() == [0, 0, 2] and lab.ignored == 2 and not lab.together.any()


def test_agglomerate_merges_by_mean_affinity():
    w = np.array([[0, 5, -1, -9], [5, 0, 1, -9], [-1, 1, 0, -9], [-9, -9, -9, 0]], float)
    clusters = sorted(sorted(c) for c in agglomerate(w, [0, 1, 2, 3], 0.0))
    # {0,1} merge first (5); then {0,1} with 2 has mean (−1+1)/2 = 0, not > 0: stays apart
    assert clusters == [[0, 1], [2], [3]]


def _agglomerate_by_definition(affinity, members, threshold):
    """Average linkage as defined: at each step the mean of every pair of clusters, the first
    best pair (in order) merged while its mean is above ``threshold``."""
    clusters = [[m] for m in members]
    while len(clusters) > 1:
        best, pair = threshold, None
        for a in range(len(clusters)):
            for b in range(a + 1, len(clusters)):
                score = float(affinity[np.ix_(clusters[a], clusters[b])].mean())
                if score > best:
                    best, pair = score, (a, b)
        if pair is None:
            return clusters
        clusters[pair[0]] = clusters[pair[0]] + clusters[pair[1]]
        del clusters[pair[1]]
    return clusters


def test_agglomerate_is_average_linkage_as_defined_ties_included():
    rng = np.random.default_rng(7)
    for _ in range(150):
        n = int(rng.integers(1, 25))
        w = rng.normal(size=(n, n)) + rng.uniform(-1, 1)
        w = (w + w.T) / 2
        members = sorted(rng.choice(n, size=int(rng.integers(0, n + 1)), replace=False).tolist())
        assert agglomerate(w, members, 0.2) == _agglomerate_by_definition(w, members, 0.2)
    for _ in range(100):  # small integers: many equal means, the first pair in order wins
        n = int(rng.integers(2, 12))
        w = rng.integers(-2, 3, size=(n, n)).astype(float)
        w = w + w.T
        assert agglomerate(w, list(range(n)), 0.0) == _agglomerate_by_definition(w, list(range(n)), 0.0)
