"""The offline HeuristicTeacher on small hand-made embeddings (fast, no MiniLM)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest

from langchain_membrain.errors import InvalidOperationError
from langchain_membrain.teachers.base import NewFact, Subtree, Teacher
from langchain_membrain.teachers.heuristic import HeuristicConfig, HeuristicTeacher
from langchain_membrain.tree.actions import Demote, Group, Promote, validate_action
from langchain_membrain.tree.actions import apply_actions as rewrite
from langchain_membrain.tree.placement import attach, descend, destination, stage1_candidates
from langchain_membrain.tree.tree import MembrainTree

DIM = 8


def unit(*xs: float) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float64)
    v[: len(xs)] = xs
    return (v / np.linalg.norm(v)).astype(np.float32)


def axis(i: int) -> np.ndarray:
    v = np.zeros(DIM, dtype=np.float32)
    v[i] = 1.0
    return v


def subtree(tree: MembrainTree, node: str) -> Subtree:
    return Subtree(tree, node, stage1_candidates(tree, node, None))


# ------------------------------------------------------------------ config
def test_config_theta_and_validation():
    cfg = HeuristicConfig(theta0=0.4, rate=0.5, depth_scale=10)
    assert cfg.theta(0) == pytest.approx(0.4)
    assert cfg.theta(4) == pytest.approx(0.4 * math.exp(0.2))
    m = HeuristicConfig.memtree()
    assert (m.theta0, m.rate, m.depth_scale, m.size_aware, m.stage2) == (0.4, 0.5, 10.0, False, False)
    for bad in ({"depth_scale": 0}, {"crowd": 1}, {"max_label_words": 5}):
        with pytest.raises(InvalidOperationError):
            HeuristicConfig(**bad)
    assert isinstance(HeuristicTeacher(), Teacher)
    assert HeuristicTeacher(theta0=0.3).config.theta0 == 0.3


# ----------------------------------------------------------------- stage 1
def test_stage1_descends_only_when_the_threshold_is_reached():
    t = MembrainTree("s")
    a = t.add_aspect(t.root_id, "A")
    t.add_fact(a, "a", embedding=axis(0))
    b = t.add_aspect(t.root_id, "B")
    t.add_fact(b, "b", embedding=axis(1))
    teacher = HeuristicTeacher(theta0=0.5, rate=0.0)
    sub = subtree(t, t.root_id)
    # cos 0.6 to A's only fact: 0.6 >= 0.5, descend into A (index 1).
    assert teacher.choose_stage1(NewFact("x", unit(0.6, 0.0, 0.8)), sub) == sub.candidates.index(a)
    # cos 0.4 to A and 0 to B: below 0.5, attach here.
    assert teacher.choose_stage1(NewFact("y", unit(0.4, 0.0, math.sqrt(1 - 0.16))), sub) == 0
    # The better of two passing aspects wins.
    assert teacher.choose_stage1(NewFact("z", unit(0.6, 0.7, 0.2)), sub) == sub.candidates.index(b)


def test_stage1_threshold_grows_with_the_current_depth():
    t = MembrainTree("s")
    top = t.add_aspect(t.root_id, "top")
    inner = t.add_aspect(top, "inner")
    t.add_fact(inner, "a", embedding=axis(0))
    teacher = HeuristicTeacher(theta0=0.5, rate=3.0, depth_scale=10.0)  # theta(0)=0.5, theta(1)=0.675
    fact = NewFact("x", unit(0.6, 0.0, 0.8))  # affinity 0.6 to both aspects
    assert teacher.choose_stage1(fact, subtree(t, t.root_id)) == 1  # depth 0: 0.6 >= 0.5
    assert teacher.choose_stage1(fact, subtree(t, top)) == 0  # depth 1: 0.6 < 0.675


def test_size_aware_descent_avoids_the_catch_all():
    # C holds two unrelated facts: its mean points exactly at the new fact (cosine 1.0) but is
    # short (|m| = 0.707), so its affinity is 0.707. S holds one fact at cosine 0.8.
    t = MembrainTree("s")
    c = t.add_aspect(t.root_id, "catch-all")
    t.add_fact(c, "c1", embedding=axis(0))
    t.add_fact(c, "c2", embedding=axis(1))
    s = t.add_aspect(t.root_id, "specific")
    f = unit(1.0, 1.0)
    t.add_fact(s, "s1", embedding=(0.8 * f + 0.6 * axis(2)).astype(np.float32))
    sub = subtree(t, t.root_id)
    new = NewFact("new", f)
    assert HeuristicTeacher(theta0=0.2, rate=0.0).choose_stage1(new, sub) == sub.candidates.index(s)
    memtree = HeuristicTeacher(HeuristicConfig.memtree(theta0=0.2, rate=0.0))
    assert memtree.choose_stage1(new, sub) == sub.candidates.index(c)


# ----------------------------------------------------------------- stage 2
def test_promote_when_closer_to_the_grandparent():
    t = MembrainTree("s")
    p = t.add_aspect(t.root_id, "P")
    t.add_fact(p, "p1", embedding=axis(0))
    t.add_fact(p, "p2", embedding=unit(1.0, 0.1))
    t.add_fact(t.root_id, "g1", embedding=axis(3))
    t.add_fact(t.root_id, "g2", embedding=unit(0.1, 0.0, 0.0, 1.0))
    f = t.add_fact(p, "f", embedding=unit(0.0, 0.0, 0.2, 1.0))
    acts = HeuristicTeacher().choose_stage2(t, t.closure(f))
    assert Promote(f) in acts
    for a in acts:
        validate_action(t, a)


def test_demote_into_the_closer_sibling_aspect():
    t = MembrainTree("s")
    s = t.add_aspect(t.root_id, "S")
    t.add_fact(s, "s1", embedding=axis(0))
    t.add_fact(s, "s2", embedding=unit(1.0, 0.1))
    t.add_fact(t.root_id, "r1", embedding=axis(4))
    f = t.add_fact(t.root_id, "f", embedding=unit(1.0, 0.0, 0.3))
    acts = HeuristicTeacher().choose_stage2(t, t.closure(f))
    assert acts == [Demote(f, s)]


def test_only_the_new_fact_moves_unless_siblings_are_tidied():
    """By default stage 2 moves the new fact alone (a student can predict that); with
    ``tidy_siblings`` it also moves a sibling fact that stage 1 would now place elsewhere."""
    t = MembrainTree("s")
    s = t.add_aspect(t.root_id, "S")
    t.add_fact(s, "s1", embedding=axis(0))
    t.add_fact(s, "s2", embedding=unit(1.0, 0.1))
    t.add_fact(t.root_id, "r1", embedding=axis(4))
    x = t.add_fact(t.root_id, "x", embedding=unit(1.0, 0.0, 0.3))  # placed before S fitted it
    f = t.add_fact(t.root_id, "f", embedding=unit(0.0, 0.0, 0.0, 0.0, 0.2, 1.0))
    assert HeuristicTeacher().choose_stage2(t, t.closure(f)) == []
    assert Demote(x, s) in HeuristicTeacher(tidy_siblings=True).choose_stage2(t, t.closure(f))


def test_group_tight_clusters_only_when_crowded():
    t = MembrainTree("s")
    tight = [t.add_fact(t.root_id, f"a{i}", embedding=unit(1.0, 0.05 * i)) for i in range(3)]
    t.add_fact(t.root_id, "lone1", embedding=axis(5))
    f = t.add_fact(t.root_id, "lone2", embedding=axis(6))
    acts = HeuristicTeacher(crowd=4).choose_stage2(t, t.closure(f))
    assert [a for a in acts if isinstance(a, Group)] == [Group(tuple(tight))]
    assert HeuristicTeacher(crowd=6).choose_stage2(t, t.closure(f)) == []


def test_never_groups_past_the_trees_height_bound():
    t = MembrainTree("s", max_height=1)  # facts at the root only: no aspect fits
    tight = [t.add_fact(t.root_id, f"a{i}", embedding=unit(1.0, 0.05 * i)) for i in range(3)]
    t.add_fact(t.root_id, "lone1", embedding=axis(5))
    f = t.add_fact(t.root_id, "lone2", embedding=axis(6))
    assert HeuristicTeacher(crowd=4).choose_stage2(t, t.closure(f)) == []
    t.max_height = 2
    assert HeuristicTeacher(crowd=4).choose_stage2(t, t.closure(f)) == [Group(tuple(tight))]


def test_without_room_a_crowded_aspect_is_split_sideways():
    """Under max_height 2 no aspect fits below a top-level aspect: its tight cluster is
    promoted beside it (to be grouped there) instead of grouped one level deeper."""
    t = MembrainTree("s", max_height=2)
    p = t.add_aspect(t.root_id, "p")
    tight = [t.add_fact(p, f"a{i}", embedding=unit(1.0, 0.05 * i)) for i in range(3)]
    t.add_fact(p, "lone1", embedding=axis(5))
    f = t.add_fact(p, "lone2", embedding=axis(6))
    t.add_fact(t.root_id, "elsewhere", embedding=axis(7))
    acts = HeuristicTeacher(crowd=4, split_min=0, overfull=1.0).choose_stage2(t, t.closure(f))
    assert not any(isinstance(a, Group) for a in acts)
    assert {a.node_id for a in acts if isinstance(a, Promote)} >= set(tight)
    t.max_height = 3
    acts = HeuristicTeacher(crowd=4, split_min=0, overfull=1.0).choose_stage2(t, t.closure(f))
    assert Group(tuple(tight)) in acts


def test_never_groups_all_of_the_parents_children():
    t = MembrainTree("s")
    ids = [t.add_fact(t.root_id, f"a{i}", embedding=unit(1.0, 0.05 * i)) for i in range(5)]
    assert HeuristicTeacher().choose_stage2(t, t.closure(ids[-1])) == []


def test_aspect_actions_nest_mutually_similar_aspects():
    t = MembrainTree("s")
    big = t.add_aspect(t.root_id, "big")
    for i in range(3):
        t.add_fact(big, f"b{i}", embedding=unit(1.0, 0.2, 0.1 * i))
    small = t.add_aspect(t.root_id, "small")
    for i in range(2):
        t.add_fact(small, f"s{i}", embedding=unit(1.0, 0.3, 0.0, 0.1 * i))
    other = t.add_aspect(t.root_id, "other")
    for i in range(3):
        t.add_fact(other, f"o{i}", embedding=unit(0.0, 0.0, 0.0, 0.0, 1.0, 0.1 * i))
    f = t.add_fact(t.root_id, "f", embedding=axis(7))
    on = HeuristicTeacher(aspect_actions=True).choose_stage2(t, t.closure(f))
    assert Demote(small, big) in on
    for a in on:
        validate_action(t, a, allow_aspects=True)
    off = HeuristicTeacher(aspect_actions=False).choose_stage2(t, t.closure(f))
    assert not any(t.node(a.node_id).kind == "aspect" for a in off if isinstance(a, (Promote, Demote)))


def test_stage2_off_and_embeddingless_facts_are_idle():
    t = MembrainTree("s")
    for i in range(5):
        t.add_fact(t.root_id, f"a{i}", embedding=unit(1.0, 0.01 * i))
    f = t.add_fact(t.root_id, "no embedding")
    assert HeuristicTeacher(stage2=False).choose_stage2(t, t.closure(f)) == []
    assert all(f not in getattr(a, "node_ids", (getattr(a, "node_id", None),))
               for a in HeuristicTeacher().choose_stage2(t, t.closure(f)))


@pytest.mark.parametrize("aspect_actions", [False, True])
def test_every_action_validates_on_random_inserts(aspect_actions):
    """Insert clustered random facts; each stage-2 series must validate, action by action,
    on the tree as given, then apply cleanly in order."""
    rng = np.random.default_rng(3)
    centres = rng.standard_normal((5, DIM))
    teacher = HeuristicTeacher(aspect_actions=aspect_actions, crowd=3, theta0=0.2)
    t = MembrainTree("s")
    n_actions = 0
    for i in range(150):
        v = centres[rng.integers(5)] + 0.4 * rng.standard_normal(DIM)
        nf = NewFact(f"fact {i}", (v / np.linalg.norm(v)).astype(np.float32))
        parent = destination(descend(t, nf, lambda sub: teacher.choose_stage1(nf, sub)))
        fid = attach(t, nf, parent)
        acts = teacher.choose_stage2(t, t.closure(fid))
        for a in acts:
            validate_action(t, a, allow_aspects=aspect_actions)
        touched = [getattr(a, "node_id", None) for a in acts if not isinstance(a, Group)]
        touched += [n for a in acts if isinstance(a, Group) for n in a.node_ids]
        assert len(touched) == len(set(touched))  # one action per node
        applied, skipped = rewrite(t, acts, name_aspect=teacher.name_aspect, allow_aspects=aspect_actions)
        assert skipped == []
        n_actions += len(applied)
        t.check_invariants()
    assert n_actions > 20 and len(t.aspects()) > 3
    for a in t.aspects():
        assert 1 <= len(t.node(a).text.split()) <= 4


# ------------------------------------------------------------------- naming
def test_labels_are_one_to_four_distinctive_words():
    teacher = HeuristicTeacher()
    corpus = [f"animal: an animal that lives in place {i}" for i in range(20)]
    teacher.name_aspect(corpus)  # the teacher learns that "animal" is everywhere
    label = teacher.name_aspect(["robin: a small bird with a red breast", "wren: a tiny brown bird",
                                 "finch: a seed-eating bird"])
    assert label.split()[0] == "bird" and "animal" not in label.split()
    assert 1 <= len(label.split()) <= 4


@pytest.mark.parametrize("texts", [[], [""], ["the of and"], ["!!! ???"], ["a b"], ["Ünïcode wörds ok"],
                                   ["x" * 500], ["one", "two", "three", "four", "five", "six"]])
def test_labels_are_never_empty(texts):
    label = HeuristicTeacher().name_aspect(texts)
    assert label.strip() and 1 <= len(label.split()) <= 4


def test_random_texts_always_get_a_short_label():
    rng = random.Random(0)
    words = ["bird", "fish", "the", "of", "red", "small", "a", "sea", "!", "42", "tree", "and"]
    teacher = HeuristicTeacher()
    for _ in range(200):
        texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 8))) for _ in range(rng.randint(1, 5))]
        label = teacher.name_aspect(texts)
        assert label.strip() and 1 <= len(label.split()) <= 4


def test_stage2_looks_only_at_the_nearest_siblings_of_a_wide_parent():
    rng = np.random.default_rng(0)
    t = MembrainTree("s")
    far = [t.add_fact(t.root_id, f"far{i}", embedding=unit(0, 0, 0, 0, 0, 1.0, 0.02 * i)) for i in range(3)]
    near = [t.add_fact(t.root_id, f"near{i}", embedding=unit(1.0, 0.02 * i)) for i in range(3)]
    for i in range(30):  # scattered facts, none close to anything
        v = rng.standard_normal(DIM)
        t.add_fact(t.root_id, f"noise{i}", embedding=(v / np.linalg.norm(v)).astype(np.float32))
    f = t.add_fact(t.root_id, "f", embedding=unit(1.0, 0.03))
    wide = HeuristicTeacher(max_neighbourhood=8, crowd=4).choose_stage2(t, t.closure(f))
    groups = [set(a.node_ids) for a in wide if isinstance(a, Group)]
    assert any(set(near) | {f} <= g for g in groups)
    assert not any(set(far) & g for g in groups)  # tight, but outside f's neighbourhood
    every = HeuristicTeacher(max_neighbourhood=1000, crowd=4).choose_stage2(t, t.closure(f))
    assert any(set(far) <= set(a.node_ids) for a in every if isinstance(a, Group))


def test_with_an_embedder_a_group_is_named_by_the_topic_its_facts_share():
    from langchain_membrain.tree.vocabulary import TopicVocabulary

    # Facts and topics on the same axes: the tight facts lie along "garden".
    topics = {"garden": axis(0), "music": axis(3), "cycling": axis(4)}

    def embed(texts: list[str]) -> np.ndarray:
        return np.asarray([topics.get(t, unit(1.0, 0.05)) for t in texts])

    def groups(sibling: str | None) -> list[Group]:
        t = MembrainTree("s")
        if sibling:
            t.add_aspect(t.root_id, sibling)
        for i in range(3):
            t.add_fact(t.root_id, f"roses {i}", embedding=unit(1.0, 0.05 * i))
        t.add_fact(t.root_id, "lone1", embedding=axis(5))
        f = t.add_fact(t.root_id, "lone2", embedding=axis(6))
        teacher = HeuristicTeacher(crowd=4, embed=embed)
        teacher.vocabulary = TopicVocabulary(embed, list(topics))  # a small vocabulary for the test
        return [a for a in teacher.choose_stage2(t, t.closure(f)) if isinstance(a, Group)]

    assert [g.label for g in groups(None)] == ["garden"]
    named = groups("Garden")  # a sibling has that name already: the facts' own words name it
    assert len(named) == 1 and named[0].label and named[0].label.casefold() != "garden"
    assert HeuristicTeacher(crowd=4).vocabulary is None  # without an embedder, name_aspect names it later
