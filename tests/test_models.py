"""Stage1Net/Stage2Net shapes and masks, and the node features they read."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.cluster.hierarchy import cophenet, linkage

from langchain_membrain.students import features as ft
from langchain_membrain.students.models import (
    Stage1Net,
    Stage2Net,
    collate_stage1,
    collate_stage2,
    torch_threads,
)
from langchain_membrain.students.nets import NEG, ModelConfig
from langchain_membrain.teachers.base import NewFact, Subtree
from langchain_membrain.tree.placement import stage1_candidates
from langchain_membrain.tree.tree import MembrainTree

DIM = 16


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _unit(v):
    return v / np.linalg.norm(v)


def build_tree(seed: int = 0) -> tuple[MembrainTree, dict[str, str]]:
    """root -> a, b (aspects); a -> a1 (aspect); facts under root, a, b and a1."""
    rng = np.random.default_rng(seed)
    tree = MembrainTree("subject", dim=DIM)
    ids = {}
    ids["a"] = tree.add_aspect(tree.root_id, "a", embedding=_unit(rng.normal(size=DIM)))
    ids["b"] = tree.add_aspect(tree.root_id, "b", embedding=_unit(rng.normal(size=DIM)))
    ids["a1"] = tree.add_aspect(ids["a"], "a1", embedding=_unit(rng.normal(size=DIM)))
    for parent, n in [("a", 4), ("b", 3), ("a1", 3)]:
        for i in range(n):
            ids[f"{parent}-f{i}"] = tree.add_fact(ids[parent], f"{parent} fact {i}",
                                                  embedding=_unit(rng.normal(size=DIM)))
    ids["root-f0"] = tree.add_fact(tree.root_id, "root fact", embedding=_unit(rng.normal(size=DIM)))
    return tree, ids


def test_stage1_features_layout():
    tree, ids = build_tree()
    q = _unit(np.random.default_rng(1).normal(size=DIM)).astype(np.float32)
    cands = stage1_candidates(tree, tree.root_id, q)
    f = ft.stage1_features(tree, NewFact("new", q), Subtree(tree, tree.root_id, cands))
    assert f.n_candidates == 3  # root, a, b
    assert f.n_tokens == 1 + 3 + 1  # new fact, candidates, one child fact of the root as context
    assert f.num.shape == (5, ft.STAGE1_NUM)
    assert f.kind.tolist() == [ft.KIND_ID[k] for k in ("new", "root", "aspect", "aspect", "fact")]
    # aff is the dot product with the mean embedding of the facts below.
    a_mean = tree.mean_embedding(ids["a"])
    assert f.num[2, ft.S1["aff"]] == pytest.approx(float(q @ a_mean), abs=1e-5)
    best = max(float(q @ tree.mean_embedding(ids[x])) for x in ("a", "b"))
    assert f.num[1, ft.S1["best_aff"]] == pytest.approx(best, abs=1e-5)
    assert f.num[2:, ft.S1["best_aff"]].tolist() == [0.0, 0.0, 0.0]  # current node's token only


def test_stage2_features_definitions():
    tree, ids = build_tree()
    focal = ids["a-f0"]
    f = ft.stage2_features(tree, tree.closure(focal))
    assert f.fact_ids == [focal, ids["a-f1"], ids["a-f2"], ids["a-f3"]]
    assert f.aspect_ids == [ids["a1"]]
    assert f.can_promote
    e = tree.node(focal).embedding.astype(np.float64)
    # leave-one-out affinity: e . mean of a's other facts
    others = [tree.node(x).embedding for x in tree.facts_below(ids["a"]) if x != focal]
    assert f.num[0, ft.S2["aff_parent_loo"]] == pytest.approx(float(e @ np.mean(others, axis=0)), abs=1e-5)
    # affinity to the grandparent's facts outside the parent
    outside = [tree.node(x).embedding for x in tree.facts_below(tree.root_id) if x not in tree.facts_below(ids["a"])]
    assert f.num[0, ft.S2["aff_grand_out"]] == pytest.approx(float(e @ np.mean(outside, axis=0)), abs=1e-5)
    # cophenetic similarity equals scipy's
    vecs = np.stack([tree.node(x).embedding for x in f.fact_ids]).astype(np.float64)
    z = linkage(vecs, method="average", metric="cosine")
    want = 1 - cophenet(z)
    got = f.group_pair[..., ft.GROUP_COLUMNS.index("coph")][np.triu_indices(4, 1)]
    np.testing.assert_allclose(got, want, atol=1e-5)
    # type mask: all four types possible here
    assert f.type_mask().all()


def test_stage2_type_mask_without_grandparent_or_aspects():
    tree, ids = build_tree()
    f = ft.stage2_features(tree, tree.closure(ids["root-f0"]))  # under the root: no grandparent
    assert not f.can_promote
    mask = f.type_mask()
    assert not mask[:, 1].any() and mask[:, 2].all() and not mask[:, 3].any()  # one fact: no group


def _stage1_examples(tree):
    rng = np.random.default_rng(3)
    out = []
    for node in (tree.root_id, tree.child_aspects(tree.root_id)[0]):
        q = _unit(rng.normal(size=DIM)).astype(np.float32)
        out.append(ft.stage1_features(tree, NewFact("n", q), Subtree(tree, node, stage1_candidates(tree, node, q))))
    return out


def test_stage1net_masks_and_padding_invariance():
    torch.manual_seed(0)
    tree, _ = build_tree()
    net = Stage1Net(ModelConfig(dim=DIM, d_model=32, heads=4)).eval()
    ex = _stage1_examples(tree)
    with torch.no_grad():
        batched = net(collate_stage1(ex))
        for i, f in enumerate(ex):
            alone = net(collate_stage1([f]))[0]
            c = f.n_candidates
            torch.testing.assert_close(batched[i, 1:1 + c], alone[1:1 + c], atol=1e-5, rtol=1e-5)
            assert (batched[i, 0] == NEG) and (batched[i, 1 + c:] == NEG).all()


def test_stage2net_shapes_masks_and_symmetry():
    torch.manual_seed(0)
    tree, ids = build_tree()
    feats = [ft.stage2_features(tree, tree.closure(ids["a-f0"])), ft.stage2_features(tree, tree.closure(ids["b-f0"]))]
    net = Stage2Net(ModelConfig(dim=DIM, d_model=32, heads=4)).eval()
    with torch.no_grad():
        t, d, g = net(collate_stage2(feats))
        assert t.shape == (2, 4, 4) and d.shape == (2, 4, 1) and g.shape == (2, 4, 4)
        # b's facts have a grandparent (the root) but no sibling aspect: promote yes, demote no
        assert (t[1, :3, 1] > NEG).all() and (t[1, :3, 2] == NEG).all()
        assert (t[1, 3, 1:] == NEG).all()  # padding fact row: idle only
        assert (d[1] == NEG).all()
        torch.testing.assert_close(g[0], g[0].T)
        assert (torch.diagonal(g[0]) == NEG).all()
        assert (g[1, 3, :] == NEG).all()  # padding
        alone = net(collate_stage2(feats[1:]))
        torch.testing.assert_close(alone[0][0, :3], t[1, :3], atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(alone[2][0, :3, :3], g[1, :3, :3], atol=1e-5, rtol=1e-5)


def test_model_config_rejects_bad_heads():
    with pytest.raises(AssertionError):
        Stage1Net(ModelConfig(dim=DIM, d_model=30, heads=4))


def test_torch_threads_sets_the_count_inside_the_block_and_restores_it_after():
    torch.set_num_threads(3)
    with torch_threads(1):
        assert torch.get_num_threads() == 1
    assert torch.get_num_threads() == 3
    with pytest.raises(RuntimeError), torch_threads(2):
        assert torch.get_num_threads() == 2
        raise RuntimeError("a failing forward")
    assert torch.get_num_threads() == 3
    with torch_threads(None):
        assert torch.get_num_threads() == 3
