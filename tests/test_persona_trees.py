"""Trees a person would draw: 40 to 50 facts about five topics, through MembrainMemory.add.

The personas were written for the project (data/PERSONAS.md); the held-out set was written
apart from the one the prior was trained on and the thresholds were tuned on. The issue's
goal (dendrogram purity >= 0.7 per persona) is not met yet: these tests hold what is reached
(see the README's Limitations), so that it does not slip back.
"""

from __future__ import annotations

import numpy as np
import pytest

from langchain_membrain import MembrainMemory
from langchain_membrain.bench.persona_sets import load_personas
from langchain_membrain.tree.evaluation import dendrogram_purity, flat_tree

pytestmark = pytest.mark.usefixtures("one_torch_thread")

HELDOUT = load_personas("heldout")


@pytest.fixture(scope="module")
def trees():
    """Each held-out persona through its own MembrainMemory: (tree, purity, flat purity)."""
    from langchain_membrain.index.embeddings import MiniLMEmbeddings

    embeddings = MiniLMEmbeddings()
    out = {}
    for persona, rows in sorted(HELDOUT.items()):
        topics = [r["topic"] for r in rows]
        with MembrainMemory(embeddings=embeddings, background=False) as mem:
            keys = [mem.add(r["text"], namespace=persona) for r in rows]
            tree = mem.tree(persona).copy()
        flat, ids = flat_tree(np.zeros((len(rows), 1)))
        out[persona] = (tree, dendrogram_purity(tree, dict(zip(keys, topics))),
                        dendrogram_purity(flat, dict(zip(ids, topics))))
    return out


def test_every_persona_gets_topic_aspects(trees):
    for persona, (tree, _, _) in trees.items():
        tree.check_invariants()
        assert len(tree.child_aspects(tree.root_id)) >= 2, persona
    assert sum(len(t.child_aspects(t.root_id)) >= 3 for t, _, _ in trees.values()) >= len(trees) // 2


def test_the_trees_group_by_topic_better_than_a_flat_list(trees):
    purity = np.mean([p for _, p, _ in trees.values()])
    flat = np.mean([f for _, _, f in trees.values()])
    assert purity >= flat + 0.05, (purity, flat)


def test_labels_are_short_phrases_that_differ_from_their_neighbours(trees):
    for tree, _, _ in trees.values():
        for a in tree.aspects():
            label = tree.node(a).text
            assert 1 <= len(label.split()) <= 4, label
            parent = tree.parent(a)
            near = [tree.node(s).text.casefold() for s in tree.child_aspects(parent) if s != a]
            near += [tree.node(n).text.casefold() for n in tree.path(parent) if n != tree.root_id]
            assert label.casefold() not in near, (label, near)
