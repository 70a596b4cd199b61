"""Aspect labels that follow their facts: stale aspects, typical facts, renaming in a memory."""

from __future__ import annotations

import numpy as np
from helpers import WordEmbeddings

from langchain_membrain.memory import MembrainMemory
from langchain_membrain.tree.labels import LABELLED_FACTS, stale_aspects, typical_facts
from langchain_membrain.tree.tree import MembrainTree


def vec(*xs: float) -> np.ndarray:
    return np.array(xs, dtype=np.float32)


def test_an_aspect_is_stale_once_it_has_doubled_since_it_was_named():
    tree = MembrainTree("me", dim=2)
    knee = tree.group([tree.add_fact(tree.root_id, "my knee hurts", embedding=vec(1, 0)),
                       tree.add_fact(tree.root_id, "knee strain", embedding=vec(1, 0.1))], "knee")
    runs = [tree.add_fact(knee, "ran 5 km", embedding=vec(0.2, 1))]
    assert stale_aspects(tree, runs[-1]) == []  # 3 facts, named at 2: not doubled
    assert stale_aspects(tree, runs[-1], growth=1.5, min_facts=0) == [knee]
    runs.append(tree.add_fact(knee, "ran 8 km", embedding=vec(0.2, 1)))
    assert stale_aspects(tree, runs[-1]) == [knee]  # 4 facts: doubled
    assert stale_aspects(tree, runs[-1], growth=4, min_facts=8) == []
    tree.set_label(knee, "running", metadata={LABELLED_FACTS: 4})
    assert stale_aspects(tree, runs[-1]) == []
    runs += [tree.add_fact(knee, f"ran {k} km", embedding=vec(0.2, 1)) for k in (10, 12, 15)]
    assert stale_aspects(tree, runs[-1]) == []  # 7 facts, named at 4
    runs.append(tree.add_fact(knee, "ran 21 km", embedding=vec(0.2, 1)))
    assert stale_aspects(tree, runs[-1]) == [knee]  # 8 facts: doubled again
    assert tree.node(knee).metadata == {LABELLED_FACTS: 4}


def test_typical_facts_are_the_nearest_to_the_mean():
    tree = MembrainTree("me", dim=2)
    a = tree.add_aspect(tree.root_id, "sport")
    for text, e in [("odd one", vec(-1, 0)), ("run", vec(1, 0)), ("jog", vec(0.9, 0.1)), ("sprint", vec(1, 0.05))]:
        tree.add_fact(a, text, embedding=e)
    assert typical_facts(tree, a, k=3)[-1] != "odd one" and "odd one" not in typical_facts(tree, a, k=3)
    assert typical_facts(tree, a, k=10)[-1] == "odd one"


def test_a_memory_renames_aspects_as_they_grow():
    dogs = [f"my dog {name} loves {place}" for name in ("rex", "max", "bo", "fido", "spot", "ace", "leo", "kai")
            for place in ("walks in the park", "the beach", "long runs", "the garden")]
    for relabel in (True, False):
        with MembrainMemory(embeddings=WordEmbeddings(), relabel=relabel) as mem:
            keys = mem.add_many(dogs, namespace="me")
            mem.flush()
            tree = mem.tree("me")
            tree.check_invariants()
            named = [a for a in tree.aspects() if LABELLED_FACTS in tree.node(a).metadata]
            if relabel:  # renamed as they grew; none above the last fact is left stale
                assert named and stale_aspects(tree, keys[-1]) == []
            else:
                assert not named and stale_aspects(tree, keys[-1]) and mem.stats()["relabelled"] == 0
