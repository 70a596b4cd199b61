"""Reads and writes of MembrainTree on hand-built trees, including every precondition."""

import json

import numpy as np
import pytest

from langchain_membrain import (
    DimensionError,
    InvalidOperationError,
    InvariantError,
    MembrainError,
    MembrainTree,
    NodeNotFoundError,
)


def vec(*xs):
    return np.array(xs, dtype=np.float32)


@pytest.fixture
def tree():
    """root
    ├── pets (aspect)
    │   ├── dog (fact)
    │   ├── cat (fact)
    │   └── birds (aspect)
    │       └── parrot (fact)
    ├── food (aspect)
    │   └── bread (fact)
    └── weather (fact)
    """
    t = MembrainTree("life")
    t.add_aspect("root", "pets", node_id="pets")
    t.add_fact("pets", "dog", embedding=vec(1, 0, 0), node_id="dog")
    t.add_fact("pets", "cat", embedding=vec(0, 1, 0), node_id="cat")
    t.add_aspect("pets", "birds", node_id="birds")
    t.add_fact("birds", "parrot", embedding=vec(0, 0, 1), node_id="parrot")
    t.add_aspect("root", "food", node_id="food")
    t.add_fact("food", "bread", embedding=vec(1, 1, 0), node_id="bread")
    t.add_fact("root", "weather", embedding=vec(0, 1, 1), node_id="weather")
    t.check_invariants()
    return t


def snapshot(t):
    return json.dumps(t.to_dict(), sort_keys=True)


def test_reads(tree):
    assert tree.subject == "life"
    assert tree.parent("dog") == "pets" and tree.parent("root") is None
    assert tree.children("pets") == ["dog", "cat", "birds"]
    assert tree.child_aspects("root") == ["pets", "food"]
    assert tree.path("parrot") == ["root", "pets", "birds", "parrot"]
    assert tree.depth("parrot") == 3 and tree.depth("root") == 0
    assert sorted(tree.facts()) == ["bread", "cat", "dog", "parrot", "weather"]
    assert sorted(tree.aspects()) == ["birds", "food", "pets"]
    assert tree.two_layer_subtree("pets") == ["pets", "dog", "cat", "birds"]
    assert tree.two_layer_subtree("dog") == ["dog"]
    assert tree.fact_count("pets") == 3 and tree.fact_count("root") == 5
    np.testing.assert_allclose(tree.mean_embedding("pets"), [1 / 3, 1 / 3, 1 / 3], atol=1e-6)
    assert tree.height() == 3


def test_closure_with_grandparent(tree):
    c = tree.closure("dog")
    assert [(m.node_id, m.role) for m in c.members] == [
        ("dog", "self"),
        ("cat", "sibling"),
        ("birds", "sibling"),
        ("pets", "parent"),
        ("food", "uncle"),
        ("weather", "uncle"),
        ("root", "grandparent"),
    ]
    assert c.parent_id == "pets" and c.grandparent_id == "root"


def test_closure_without_grandparent(tree):
    c = tree.closure("weather")
    assert [(m.node_id, m.role) for m in c.members] == [
        ("weather", "self"),
        ("pets", "sibling"),
        ("food", "sibling"),
        ("root", "parent"),
    ]
    assert c.grandparent_id is None


def test_closure_needs_a_fact(tree):
    with pytest.raises(InvalidOperationError):
        tree.closure("pets")


def test_promote(tree):
    tree.promote("parrot")  # birds is left empty and pruned
    assert tree.parent("parrot") == "pets" and "birds" not in tree
    tree.check_invariants()
    np.testing.assert_allclose(tree.mean_embedding("pets"), [1 / 3, 1 / 3, 1 / 3], atol=1e-6)


def test_demote(tree):
    tree.demote("dog", "birds")
    assert tree.path("dog") == ["root", "pets", "birds", "dog"]
    np.testing.assert_allclose(tree.mean_embedding("birds"), [0.5, 0, 0.5], atol=1e-6)
    tree.check_invariants()


def test_group_returns_new_aspect(tree):
    a = tree.group(["dog", "cat"], "mammals")
    assert tree.node(a).kind == "aspect" and tree.node(a).text == "mammals"
    assert tree.parent(a) == "pets" and tree.children(a) == ["dog", "cat"]
    tree.check_invariants()


def test_move_and_remove_prunes_empty_aspects(tree):
    tree.move("bread", "pets")
    assert "food" not in tree  # left empty
    tree.remove("parrot")
    assert "birds" not in tree
    tree.remove("dog"), tree.remove("cat"), tree.remove("bread")
    assert "pets" not in tree and tree.facts() == ["weather"]
    tree.check_invariants()


def test_update_fact(tree):
    tree.update_fact("dog", text="a dog", embedding=vec(0, 0, 2), metadata={"k": 1})
    n = tree.node("dog")
    assert n.text == "a dog" and n.metadata == {"k": 1} and n.updated_at >= n.created_at
    np.testing.assert_allclose(tree.mean_embedding("pets"), [0, 1 / 3, 1], atol=1e-6)
    tree.check_invariants()


@pytest.mark.parametrize(
    "write",
    [
        lambda t: t.promote("pets"),  # pets has no grandparent
        lambda t: t.promote("weather"),  # no grandparent
        lambda t: t.promote("root"),
        lambda t: t.promote("nope"),
        lambda t: t.demote("dog", "food"),  # not a sibling
        lambda t: t.demote("dog", "cat"),  # not an aspect
        lambda t: t.demote("pets", "pets"),
        lambda t: t.group(["dog"], "x"),  # one fact
        lambda t: t.group(["dog", "dog"], "x"),
        lambda t: t.group(["dog", "bread"], "x"),  # different parents
        lambda t: t.group(["dog", "birds"], "x"),  # an aspect
        lambda t: t.group(["dog", "cat"], 3),  # label not a str
        lambda t: t.add_fact("dog", "x"),  # facts are leaves
        lambda t: t.add_fact("nope", "x"),
        lambda t: t.add_fact("root", "x", node_id="dog"),  # id taken
        lambda t: t.add_fact("root", 42),
        lambda t: t.add_fact("root", "x", embedding=vec(1, 2)),  # wrong dimension
        lambda t: t.add_fact("root", "x", embedding=[float("nan")] * 3),
        lambda t: t.add_aspect("bread", "x"),
        lambda t: t.remove("pets"),  # only facts
        lambda t: t.remove("root"),
        lambda t: t.update_fact("pets", text="x"),
        lambda t: t.update_fact("dog", embedding=vec(1)),
        lambda t: t.move("pets", "birds"),  # into itself
        lambda t: t.move("dog", "cat"),
        lambda t: t.set_label("dog", "x"),
    ],
)
def test_failed_writes_raise_and_change_nothing(tree, write):
    before, version = snapshot(tree), tree.version
    with pytest.raises(MembrainError):
        write(tree)
    assert snapshot(tree) == before and tree.version == version
    tree.check_invariants()


def test_error_types(tree):
    with pytest.raises(NodeNotFoundError):
        tree.node("missing")
    with pytest.raises(DimensionError):
        tree.add_fact("root", "x", embedding=vec(1, 2))
    assert issubclass(MembrainError, ValueError)


def test_round_trip_is_exact(tree):
    tree.group(["dog", "cat"], "mammals")
    data = json.loads(json.dumps(tree.to_dict()))
    back = MembrainTree.from_dict(data)
    assert back.to_dict() == tree.to_dict()
    for nid in tree.graph.nodes:
        a, b = tree.node(nid), back.node(nid)
        assert (a.kind, a.text, a.created_at, a.updated_at, a.metadata) == (b.kind, b.text, b.created_at, b.updated_at, b.metadata)
        if a.embedding is not None:
            assert np.array_equal(a.embedding, b.embedding)
    assert back.children("pets") == tree.children("pets")


def test_from_dict_rejects_malformed(tree):
    data = tree.to_dict()
    data["nodes"][3]["parent"] = "nowhere"
    with pytest.raises(InvariantError):
        MembrainTree.from_dict(data)
    with pytest.raises(InvariantError):
        MembrainTree.from_dict({"format": 99, "nodes": []})
    cyclic = tree.to_dict()
    for row in cyclic["nodes"]:
        if row["id"] == "pets":
            row["parent"] = "birds"
    with pytest.raises(InvariantError):
        MembrainTree.from_dict(cyclic)


def test_check_invariants_detects_corruption(tree):
    tree.node("pets").emb_sum = tree.node("pets").emb_sum + 1.0
    with pytest.raises(InvariantError):
        tree.check_invariants()


def test_change_journal(tree):
    tree.drain_changes()
    tree.promote("parrot")
    rows, removed = tree.drain_changes()
    assert [r["id"] for r in rows] == ["parrot"] and rows[0]["parent"] == "pets"
    assert removed == ["birds"]
    assert tree.drain_changes() == ([], [])


def test_height_bound_refuses_writes_that_pass_it(tree):
    """With max_height 3 (the fixture's height), no new aspect may hold facts at depth 4:
    grouping under "birds" or "pets" or adding an aspect under "birds" is refused and
    changes nothing; grouping at the root, or moving facts, still works."""
    tree.max_height = 3
    tree.add_fact("birds", "owl", embedding=vec(0, 0, 1), node_id="owl")
    before = snapshot(tree)
    for write in (lambda: tree.group(["parrot", "owl"], "x"),  # facts at depth 4
                  lambda: tree.add_aspect("birds", "x"),
                  lambda: tree.demote("pets", "food"),  # parrot would be at depth 4
                  lambda: tree.move("pets", "food")):
        with pytest.raises(InvalidOperationError, match="max_height"):
            write()
        assert snapshot(tree) == before
    tree.group(["dog", "cat"], "mammals", node_id="mammals")  # facts at depth 3: allowed
    assert tree.height() == 3 and tree.copy().max_height == 3
    tree.max_height = 2  # a lower bound later: deeper branches stay, nothing new goes deeper
    with pytest.raises(InvalidOperationError):
        tree.group(["dog", "cat"], "y")
    assert tree.height() == 3


@pytest.mark.parametrize("bad", [0, -1, 2.5, "4", True])
def test_height_bound_must_be_a_positive_int(bad):
    with pytest.raises(InvalidOperationError):
        MembrainTree("x", max_height=bad)
