"""The joint question has a bounded size, whatever the tree's."""

from __future__ import annotations

import json

import numpy as np

from langchain_membrain.teachers.prompts import OUTLINE_BUDGET_CHARS, place_messages
from langchain_membrain.tree import MembrainTree


def test_a_large_tree_is_cut_to_the_budget_keeping_the_top_level():
    rng = np.random.default_rng(0)
    tree = MembrainTree("big", dim=8)
    tops = []
    for t in range(40):
        top = tree.add_aspect(tree.root_id, f"topic {t}")
        tops.append(top)
        for s in range(8):
            sub = tree.add_aspect(top, f"topic {t} part {s}")
            for f in range(6):
                v = rng.normal(size=8).astype(np.float32)
                tree.add_fact(sub, f"fact {t}.{s}.{f} " + "words " * 60, embedding=v / np.linalg.norm(v))
    messages, ids = place_messages("a new fact", tree)
    payload = messages[1]["content"]
    assert len(payload) <= 1.1 * OUTLINE_BUDGET_CHARS  # the entries, plus the JSON around them
    data = json.loads(payload[payload.index("{"): payload.rindex("}") + 1])
    assert data["outline_truncated"] is True
    shown = {e.get("label") for e in data["outline"] if e.get("kind") == "aspect"}
    assert {f"topic {t}" for t in range(40)} <= shown  # every top-level aspect is in the question
    assert set(tops) <= set(ids)


def test_a_small_tree_is_shown_whole():
    tree = MembrainTree("small", dim=8)
    a = tree.add_aspect(tree.root_id, "pets")
    for i in range(3):
        tree.add_fact(a, f"the dog eats {i}", embedding=np.eye(8, dtype=np.float32)[i])
    messages, ids = place_messages("the cat sleeps", tree)
    payload = messages[1]["content"]
    data = json.loads(payload[payload.index("{"): payload.rindex("}") + 1])
    assert "outline_truncated" not in data
    assert len(ids) == 1 + 1 + 1 + 3  # reserved slot, root, aspect, facts
