"""Every LLM question is at most PROMPT_BUDGET_TOKENS (1,500) tokens, counted as characters / 4
over its messages as the test server counts them, with its one retry, at any tree size: here a
1,000-fact tree with long facts, a long subject, a node with 40 child aspects and one with 150
facts (the server-side check, through the teachers, is in tests/llm/test_teacher_budget.py)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from langchain_membrain.insert.config import MAX_BATCH
from langchain_membrain.teachers import outline, prompts
from langchain_membrain.teachers.outline import place_messages
from langchain_membrain.teachers.prompts import PROMPT_BUDGET_TOKENS, prompt_tokens
from langchain_membrain.tree.placement import stage1_candidates
from langchain_membrain.tree.tree import MembrainTree

WORDS = "health work family money home food travel sport music books garden pets car school friends hobby".split()
DIM = 16


def big_tree(n_facts: int = 1000, seed: int = 0):
    """(tree, fact ids, the aspect with 150 facts, the aspect with 40 child aspects)."""
    rng = np.random.default_rng(seed)

    def vec() -> np.ndarray:
        v = rng.normal(size=DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    tree = MembrainTree("user " + "x" * 200, dim=DIM)
    containers = []
    for t, word in enumerate(WORDS):
        top = tree.add_aspect(tree.root_id, f"{word} and related matters " + "y" * (5 * t), embedding=vec())
        containers.append(top)
        for s in range(4):
            sub = tree.add_aspect(top, f"{word} part {s}", embedding=vec())
            containers.append(sub)
            containers += [tree.add_aspect(sub, f"{word} part {s}.{u}", embedding=vec()) for u in range(2)]
    wide = tree.add_aspect(tree.root_id, "wide", embedding=vec())
    containers += [tree.add_aspect(wide, f"wide child {w} " + "z" * 40, embedding=vec()) for w in range(40)]
    crowded = tree.add_aspect(containers[0], "crowded", embedding=vec())
    facts = []
    for i in range(n_facts):
        parent = crowded if i < 150 else tree.root_id if i < 170 else containers[int(rng.integers(len(containers)))]
        text = f'fact {i} <&> "quoted" ' + " ".join(WORDS[int(k)] for k in rng.integers(0, 16, int(rng.integers(10, 80))))
        facts.append(tree.add_fact(parent, text * (20 if i % 50 == 0 else 1), embedding=vec()))
    return tree, facts, crowded, wide


@pytest.fixture(scope="module")
def tree_1000():
    return big_tree()


LONG_NEW = "a new fact about my health " * 200  # 5,400 characters
RETRY = prompts.retry_message('{"garbage": "' + "<&>" * 3000 + '"}', "a long validation error " * 100)


def questions(tree: MembrainTree, facts: list[str], crowded: str, wide: str) -> dict[str, list]:
    def fact(i: int) -> str:
        return facts[min(i, len(facts) - 1)]

    near = tree.node(fact(3)).embedding
    cands = [(tree.node(f).text, 0.0) for f in facts[:5]]  # facts 0 (long) to 4
    return {
        "place": place_messages(LONG_NEW, tree, near=near)[0],
        "place, no embedding": place_messages(LONG_NEW, tree)[0],
        "operation and placement": outline.operation_place_messages(LONG_NEW, cands, tree, near=near)[0],
        "operation": prompts.operation_messages(LONG_NEW, cands),
        "batch of 4": outline.place_batch_messages([LONG_NEW] * 4, tree, near=near)[0],
        "batch of 16 (the most)": outline.place_batch_messages([LONG_NEW] * MAX_BATCH, tree, near=near)[0],
        "stage 1 at the root": prompts.stage1_messages(LONG_NEW, tree, tree.root_id,
                                                       stage1_candidates(tree, tree.root_id, near), near=near),
        "stage 1 under 40 aspects": prompts.stage1_messages(LONG_NEW, tree, wide,
                                                            stage1_candidates(tree, wide, near), near=near),
        "stage 2 among 150 siblings": prompts.stage2_messages(tree, tree.closure(fact(3))),
        "stage 2, a long fact": prompts.stage2_messages(tree, tree.closure(fact(200))),
        "naming": prompts.name_messages([tree.node(f).text for f in facts[:40]]),
    }


def test_every_question_fits_the_budget_on_a_1000_fact_tree(tree_1000):
    tree, facts, crowded, wide = tree_1000
    assert len(tree.facts()) == 1000
    for kind, messages in questions(tree, facts, crowded, wide).items():
        assert prompt_tokens(messages) <= PROMPT_BUDGET_TOKENS, kind
        assert prompt_tokens([*messages, RETRY]) <= PROMPT_BUDGET_TOKENS, kind  # with its retry
        # the server's own estimate (at least one token per message)
        assert sum(max(1, len(m["content"]) // 4) for m in [*messages, RETRY]) <= PROMPT_BUDGET_TOKENS, kind
        prompts.parse_data_block(messages[1]["content"])  # still one valid data block


def test_the_budget_holds_at_every_size():
    for n in (0, 1, 10, 100, 300):
        tree, facts, crowded, wide = big_tree(max(n, 1), seed=n)
        for kind, messages in questions(tree, facts, crowded, wide).items():
            assert prompt_tokens([*messages, RETRY]) <= PROMPT_BUDGET_TOKENS, (n, kind)


def test_a_large_tree_shows_the_branch_nearest_the_new_fact():
    """40 topics of 8 parts: the outline holds the 12 top-level aspects most similar to the
    new fact, expands the nearest one, and counts what it leaves out."""
    rng = np.random.default_rng(0)
    tree = MembrainTree("big", dim=8)
    centre = {}
    for t in range(40):
        c = rng.normal(size=8).astype(np.float32)
        top = tree.add_aspect(tree.root_id, f"topic {t}")
        centre[top] = c
        for s in range(8):
            sub = tree.add_aspect(top, f"topic {t} part {s}")
            for f in range(6):
                v = c + 0.1 * rng.normal(size=8).astype(np.float32)
                tree.add_fact(sub, f"fact {t}.{s}.{f} " + "words " * 60, embedding=v / np.linalg.norm(v))
    target = tree.child_aspects(tree.root_id)[17]
    messages, ids = place_messages("a new fact", tree, near=centre[target])
    assert prompt_tokens(messages) <= PROMPT_BUDGET_TOKENS - prompts.RETRY_RESERVE_CHARS // 4
    data = prompts.parse_data_block(messages[1]["content"])
    assert data["outline_truncated"] is True
    tops = [e for e in data["outline"] if e.get("under") == 1 and e.get("kind") == "aspect"]
    assert len(tops) == outline.OUTLINE_TOP_ASPECTS and target in ids  # the nearest topic is shown
    hidden = next(e for e in data["outline"] if e.get("kind") == "more aspects" and e["under"] == 1)
    assert hidden["count"] == 40 - len(tops)
    number = ids.index(target)
    assert any(e.get("under") == number and e.get("kind") == "aspect" for e in data["outline"])  # expanded
    assert set(ids[1:2]) == {tree.root_id}


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
    # numbered the same whatever the new fact (the outline is written in the tree's order)
    assert place_messages("x", tree, near=np.eye(8, dtype=np.float32)[2])[1] == ids


def test_the_retry_message_is_clipped():
    message = prompts.retry_message("x" * 10_000, "y" * 10_000)
    assert len(message["content"]) <= prompts.RETRY_RESERVE_CHARS
    assert prompts.parse_data_block(message["content"])["why_it_was_rejected"].startswith("yyy")
