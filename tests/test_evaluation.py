"""Dendrogram purity, the evaluation data helpers, the oracle teacher and the hierarchy bench."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import insert_by_teacher
from hypothesis import given, settings
from hypothesis import strategies as st

from langchain_membrain.bench.oracle import GT_NODE, OracleTeacher, oracle_metadata
from langchain_membrain.errors import InvalidOperationError, MembrainError, NodeNotFoundError
from langchain_membrain.teachers.base import NewFact
from langchain_membrain.tree.evaluation import (
    LabelledFact,
    average_linkage_tree,
    dendrogram_purity,
    flat_tree,
    load_labelled_facts,
    path_class,
    ranking_auc,
    tree_shape,
    wordnet_subtree_facts,
    write_labelled_facts,
)
from langchain_membrain.tree.tree import MembrainTree

ANIMALS = Path(__file__).resolve().parents[2] / "shared" / "data" / "wordnet_animal_facts.jsonl"


def brute_force_purity(tree: MembrainTree, fact_class: dict) -> float:
    """The definition, literally: every same-class pair, its lca, the share of its class."""
    classed = [f for f, c in fact_class.items() if c is not None]
    scores = []
    for a, b in itertools.combinations(classed, 2):
        if fact_class[a] != fact_class[b]:
            continue
        pa, pb = tree.path(a), tree.path(b)
        lca = [x for x, y in zip(pa, pb) if x == y][-1]
        leaves = tree.facts_below(lca)
        scores.append(sum(fact_class.get(f) == fact_class[a] for f in leaves) / len(leaves))
    return sum(scores) / len(scores)


# ------------------------------------------------------------------ purity
def test_perfect_tree_has_purity_one():
    t = MembrainTree("s")
    a, b = t.add_aspect(t.root_id, "A"), t.add_aspect(t.root_id, "B")
    cls = {t.add_fact(a, f"a{i}"): "A" for i in range(3)}
    cls |= {t.add_fact(b, f"b{i}"): "B" for i in range(2)}
    assert dendrogram_purity(t, cls) == 1.0


def test_flat_tree_of_two_balanced_classes():
    # Every pair's lca is the root, which holds 3 of 6 facts of each class: 3/6 = 0.5.
    t = MembrainTree("s")
    cls = {t.add_fact(t.root_id, f"x{i}"): ("A" if i < 3 else "B") for i in range(6)}
    assert dendrogram_purity(t, cls) == pytest.approx(0.5)


def test_hand_computed_mixed_tree():
    # root -> X{a1, a2, b1}, a3, b2.  Pairs: (a1,a2) at X: 2/3; (a1,a3), (a2,a3) at the root:
    # 3/5 each; (b1,b2) at the root: 2/5.  Mean: (2/3 + 3/5 + 3/5 + 2/5) / 4 = 17/30.
    t = MembrainTree("s")
    x = t.add_aspect(t.root_id, "X")
    cls = {t.add_fact(x, "a1"): "A", t.add_fact(x, "a2"): "A", t.add_fact(x, "b1"): "B",
           t.add_fact(t.root_id, "a3"): "A", t.add_fact(t.root_id, "b2"): "B"}
    assert dendrogram_purity(t, cls) == pytest.approx(17 / 30)


def test_unclassed_facts_dilute_but_make_no_pairs():
    t = MembrainTree("s")
    x = t.add_aspect(t.root_id, "X")
    cls = {t.add_fact(x, "a1"): "A", t.add_fact(x, "a2"): "A"}
    t.add_fact(x, "no class")  # a leaf under X, in no pair
    cls[t.add_fact(t.root_id, "also none")] = None
    assert dendrogram_purity(t, cls) == pytest.approx(2 / 3)


def test_fast_purity_matches_the_definition_on_random_trees():
    rng = random.Random(7)
    for _ in range(25):
        t = MembrainTree("s")
        containers = [t.root_id]
        cls = {}
        for i in range(rng.randint(4, 40)):
            if rng.random() < 0.3:
                containers.append(t.add_aspect(rng.choice(containers), f"a{i}"))
            else:
                cls[t.add_fact(rng.choice(containers), f"f{i}")] = rng.choice(["A", "B", "C", None])
        if sum(1 for c in cls.values() if c is not None) < 2 or max(
                list(cls.values()).count(k) for k in "ABC") < 2:
            continue
        assert dendrogram_purity(t, cls) == pytest.approx(brute_force_purity(t, cls))


def test_purity_rejects_bad_input():
    t = MembrainTree("s")
    a = t.add_aspect(t.root_id, "A")
    f1, f2 = t.add_fact(a, "x"), t.add_fact(a, "y")
    with pytest.raises(InvalidOperationError):
        dendrogram_purity(t, {f1: "A", f2: "B"})  # no pair of one class
    with pytest.raises(NodeNotFoundError):
        dendrogram_purity(t, {f1: "A", "nope": "A"})
    with pytest.raises(InvalidOperationError):
        dendrogram_purity(t, {f1: "A", a: "A"})


def test_path_class():
    assert path_class(["animal", "chordate", "bird"]) == ("animal", "chordate")
    assert path_class(["animal"]) is None
    assert path_class([]) is None
    assert path_class(None) is None


# --------------------------------------------------------- reference trees
def _two_clusters(n: int = 6, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = np.eye(8)[:2]
    x = np.concatenate([centres[i] + 0.05 * rng.standard_normal((n, 8)) for i in range(2)])
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def test_average_linkage_separates_clusters_and_flat_does_not():
    x = _two_clusters()
    tree, ids = average_linkage_tree(x)
    tree.check_invariants()
    cls = {fid: ("A" if i < 6 else "B") for i, fid in enumerate(ids)}
    assert len(ids) == 12 and dendrogram_purity(tree, cls) == 1.0
    flat, fids = flat_tree(x)
    assert dendrogram_purity(flat, {f: cls[f] for f in fids}) == pytest.approx(0.5)
    shape = tree_shape(flat)
    assert shape["facts"] == 12 and shape["aspects"] == 0 and shape["root_facts"] == 12


# --------------------------------------------------------------- data files
def test_labelled_facts_round_trip(tmp_path):
    rows = [LabelledFact("animal: a living thing", [], [], "n:1"),
            LabelledFact("dog: a canine", ["animal"], ["n:1"], "n:2")]
    p = tmp_path / "rows.jsonl"
    write_labelled_facts(rows, p)
    back = load_labelled_facts(p)
    assert [(r.text, r.path, r.path_ids, r.id, r.name) for r in back] == [
        ("animal: a living thing", [], [], "n:1", "animal"), ("dog: a canine", ["animal"], ["n:1"], "n:2", "dog")]


def test_labelled_facts_errors(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"text": "ok"}\n{"path": ["a"]}\n')
    with pytest.raises(MembrainError, match="line 2"):
        load_labelled_facts(p)
    p.write_text('{"text": "ok", "path": "not a list"}\n')
    with pytest.raises(MembrainError, match="path"):
        load_labelled_facts(p)
    with pytest.raises(MembrainError):
        load_labelled_facts(tmp_path / "missing.jsonl")


@pytest.mark.skipif(not ANIMALS.is_file(), reason="shared WordNet animal file not present")
def test_loads_the_animal_file():
    rows = load_labelled_facts(ANIMALS)
    assert len(rows) == 500 and rows[0].path == [] and rows[0].name == "animal"
    assert all(len(r.path) == len(r.path_ids) for r in rows)


@pytest.mark.skipif(not Path("/usr/share/wordnet/data.noun").is_file(), reason="wordnet-base not installed")
def test_wordnet_subtree_is_parent_closed_and_breadth_first():
    rows = wordnet_subtree_facts("food.n.02", size=60, seed=3)
    assert len(rows) == 60 and rows[0].path == [] and rows[0].text.startswith("food: ")
    seen = set()
    for r in rows:
        assert all(a in seen for a in r.path_ids)  # parents come first and are all present
        assert len(r.path) == len(r.path_ids)
        seen.add(r.id)
    with pytest.raises(MembrainError):
        wordnet_subtree_facts("nosuchlemma.n.01", size=5)


# ------------------------------------------------------------------- oracle
def synthetic_hierarchy(branching=(3, 3, 2), seed=0) -> list[LabelledFact]:
    """A complete ground-truth tree as rows in breadth-first order (root first)."""
    rows = [LabelledFact("r0: the top", [], [], "r0", "r0")]
    frontier = [("r0", [], [])]
    count = 1
    for width in branching:
        nxt = []
        for nid, path, ids in frontier:
            for _ in range(width):
                cid = f"r{count}"
                count += 1
                rows.append(LabelledFact(f"{cid}: a kind of {nid}", path + [nid], ids + [nid], cid, cid))
                nxt.append((cid, path + [nid], ids + [nid]))
        frontier = nxt
    return rows


def _oracle_build(rows, order):
    rng = np.random.default_rng(0)
    tree, teacher, cls = MembrainTree("r0"), OracleTeacher(), {}
    for i in order:
        r = rows[i]
        nf = NewFact(r.text, rng.standard_normal(8).astype(np.float32), oracle_metadata(r.id, r.path_ids, r.path))
        cls[insert_by_teacher(tree, nf, teacher)] = path_class(r.path)
    tree.check_invariants()
    return tree, cls


def test_oracle_builds_a_pure_tree_in_file_order_and_shuffled():
    rows = synthetic_hierarchy()
    tree, cls = _oracle_build(rows, range(len(rows)))
    assert dendrogram_purity(tree, cls) == 1.0
    # Every aspect stands for a ground-truth node and every fact sits under its parent's aspect.
    for f in tree.facts():
        parent = tree.parent(f)
        want = tree.node(f).metadata["path_ids"][-1:] or [None]
        got = tree.node(parent).metadata.get(GT_NODE) if parent != tree.root_id else "r0"
        assert got == (want[0] if want[0] is not None else "r0") or parent == tree.root_id
    order = list(range(len(rows)))
    random.Random(1).shuffle(order)
    tree, cls = _oracle_build(rows, order)
    assert dendrogram_purity(tree, cls) == 1.0


def test_oracle_promotes_demotes_and_names():
    t = MembrainTree("r0")
    wrong = t.add_aspect(t.root_id, "wrong", metadata={GT_NODE: "zz"})
    right = t.add_aspect(t.root_id, "A", metadata={GT_NODE: "A"})
    t.add_fact(right, "a1: x", metadata=oracle_metadata("a1", ["r0", "A"]))
    t.add_fact(wrong, "z1: y", metadata=oracle_metadata("z1", ["r0", "zz"]))
    misplaced = t.add_fact(wrong, "a2: y", metadata=oracle_metadata("a2", ["r0", "A"]))
    at_root = t.add_fact(t.root_id, "a3: y", metadata=oracle_metadata("a3", ["r0", "A"]))
    oracle = OracleTeacher(root_node="r0")
    from langchain_membrain.tree.actions import Demote, Promote, validate_action
    acts = oracle.choose_stage2(t, t.closure(misplaced))
    assert Promote(misplaced) in acts
    acts = oracle.choose_stage2(t, t.closure(at_root))
    assert acts == [Demote(at_root, right)]
    for a in acts:
        validate_action(t, a)
    assert oracle.name_aspect(["a2: y", "a3: y"]) == "A"
    assert oracle.name_aspect(["never seen"]) == "group"


# ------------------------------------------------------------------- bench
@pytest.mark.skipif(not ANIMALS.is_file(), reason="shared WordNet animal file not present")
def test_hierarchy_bench_end_to_end(tmp_path):
    from langchain_membrain.bench.__main__ import main

    out, export = tmp_path / "h.json", tmp_path / "tree.json"
    assert main(["hierarchy", "--data", str(ANIMALS), "--limit", "60", "--json", str(out),
                 "--export", str(export)]) == 0
    res = json.loads(out.read_text())
    methods = res["methods"]
    assert set(methods) == {"heuristic", "heuristic+aspects", "memtree", "flat", "average_linkage", "oracle",
                            "product", "product+oracle"}
    # through MembrainMemory: every fact placed, with fewer questions than inserts
    assert methods["product"]["questions_per_insert"] < 1.0
    assert methods["oracle"]["dendrogram_purity"] == 1.0
    assert all(0.0 < m["dendrogram_purity"] <= 1.0 for m in methods.values())
    tree = MembrainTree.from_dict(json.loads(export.read_text()))
    assert tree.fact_count(tree.root_id) == 60


# ---------------------------------------------------------------- ranking AUC
def _pairwise_auc(scores, labels):
    """The definition: P(a random positive scores above a random negative), ties one half."""
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


@settings(deadline=None)  # the first example imports scipy.stats
@given(st.lists(st.tuples(st.integers(0, 5), st.booleans()), min_size=2, max_size=40))
def test_ranking_auc_is_the_probability_a_positive_outranks_a_negative(rows):
    scores = [float(s) for s, _ in rows]  # few distinct values: many ties
    labels = [y for _, y in rows]
    got = ranking_auc(scores, labels)
    if all(labels) or not any(labels):
        assert got is None
    else:
        assert got == pytest.approx(_pairwise_auc(scores, labels))


def test_ranking_auc_reads_perfect_reversed_and_uninformative_scores():
    assert ranking_auc([0.1, 0.2, 0.8, 0.9], [False, False, True, True]) == 1.0
    assert ranking_auc([0.1, 0.2, 0.8, 0.9], [True, True, False, False]) == 0.0
    assert ranking_auc([0.5] * 6, [True, False] * 3) == 0.5
    with pytest.raises(InvalidOperationError):
        ranking_auc([0.1, 0.2], [True])
