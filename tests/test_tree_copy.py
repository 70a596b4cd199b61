"""Copy-on-write tree copies (tree/cow.py): a copy and its original share node records until
one writes, and neither ever sees the other's writes; they end as node-by-node copies would."""

import itertools
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from test_cli import WordHashEmbeddings

from langchain_membrain import InvalidOperationError, MembrainTree
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.teachers.heuristic import HeuristicTeacher

REPO = Path(__file__).resolve().parents[1]


def vec(*xs):
    return np.array(xs, dtype=np.float32)


def build():
    """root ─ pets (dog, cat, birds (parrot)), food (bread), weather; a raw item archived.
    A fixed clock, so that the same writes give the same rows."""
    t = MembrainTree("life", clock=lambda: 1000.0)
    for parent, kind, name, emb in [("root", "aspect", "pets", (1, 1, 1)), ("pets", "fact", "dog", (1, 0, 0)),
                                    ("pets", "fact", "cat", (0, 1, 0)), ("pets", "aspect", "birds", None),
                                    ("birds", "fact", "parrot", (0, 0, 1)), ("root", "aspect", "food", None),
                                    ("food", "fact", "bread", (1, 1, 0)), ("root", "fact", "weather", (0, 1, 1))]:
        add = t.add_fact if kind == "fact" else t.add_aspect
        add(parent, name, node_id=name, embedding=None if emb is None else vec(*emb))
    t.update_fact("dog", metadata={"tags": ["a"]})
    t.keep_raw("r1", "I have a dog and a cat")
    t.drain_changes()
    return t


def snapshot(t):
    return json.dumps({"tree": t.to_dict(), "version": t.version, "seq": t._seq}, sort_keys=True)


def _apply_foreign_rows(t):
    """Another copy's changes, applied: a new fact and a moved one."""
    other = build()
    other.add_fact("food", "cheese", embedding=vec(1, 0, 1), node_id="cheese")
    other.move("cat", "birds")
    t.apply_rows(*other.drain_changes())


WRITES = {
    "add_fact": lambda t: t.add_fact("pets", "hamster", embedding=vec(1, 0, 1), node_id="hamster"),
    "add_aspect": lambda t: t.add_aspect("food", "fruit", node_id="fruit", embedding=vec(0, 0, 1)),
    "remove": lambda t: t.remove("parrot"),  # prunes the emptied aspect too
    "update": lambda t: t.update_fact("dog", text="old dog", embedding=vec(0, 1, 1), metadata={"k": 1}),
    "set_label": lambda t: t.set_label("pets", "animals", embedding=vec(0, 0, 2), metadata={"m": 2}),
    "promote": lambda t: t.promote("parrot"),
    "demote": lambda t: t.demote("dog", "birds"),
    "group": lambda t: t.group(["dog", "cat"], "mammals", node_id="mammals", embedding=vec(1, 1, 0)),
    "move": lambda t: t.move("bread", "birds"),
    "supersede": lambda t: t.supersede("cat", "the cat left", embedding=vec(1, 0, 1)),
    "retire": lambda t: t.retire("weather"),
    "archive": lambda t: (t.log_ignored("i1", "hello there"), t.set_working("s", "one"), t.set_working("s", "two")),
    "purge": lambda t: t.purge_archived(["r1"]),
    "apply_rows": _apply_foreign_rows,
}


@pytest.mark.parametrize("side", ["copy", "original"])
@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_write_to_either_side_never_shows_in_the_other(write, side):
    t = build()
    c = t.copy()
    before = snapshot(t)
    target, other = (c, t) if side == "copy" else (t, c)
    reference = build()
    WRITES[write](reference)
    WRITES[write](target)
    assert snapshot(other) == before
    assert snapshot(target) == snapshot(reference)
    target.check_invariants()
    other.check_invariants()


def test_both_sides_written_after_the_copy_each_see_only_their_own():
    t = build()
    c = t.copy()
    WRITES["group"](c)
    WRITES["supersede"](t)
    WRITES["update"](c)
    WRITES["remove"](t)
    ref_c, ref_t = build(), build()
    for name in ("group", "update"):
        WRITES[name](ref_c)
    for name in ("supersede", "remove"):
        WRITES[name](ref_t)
    assert snapshot(c) == snapshot(ref_c) and snapshot(t) == snapshot(ref_t)
    assert "mammals" not in t and "parrot" in c and t.node("dog").text == "dog"


def test_a_nodes_metadata_is_not_shared_once_written():
    t = build()
    c = t.copy()
    c.update_fact("dog", text="dog")  # c now owns dog's record
    c.node("dog").metadata["tags"].append("b")  # the inner list is the caller's, as before
    assert t.node("dog").metadata is not c.node("dog").metadata


def test_an_unwritten_node_is_shared_and_a_written_one_is_not():
    t = build()
    c = t.copy()
    assert c.node("bread") is t.node("bread")
    assert c.node("food") is t.node("food")
    c.update_fact("bread", text="rye", embedding=vec(0, 0, 1))
    assert c.node("bread") is not t.node("bread") and t.node("bread").text == "bread"
    # its ancestors' sums changed too, in the copy only
    assert c.node("food").emb_sum.tolist() == [0, 0, 1] and t.node("food").emb_sum.tolist() == [1, 1, 0]
    assert c.node("pets") is t.node("pets")  # not on the written path: still shared


def _random_write(rng: random.Random, t: MembrainTree, step: int):
    """A write drawn from what the tree allows, as a function of a tree (so the same write
    can be made on a reference)."""
    facts, aspects = sorted(t.facts()), sorted(t.aspects())
    containers = ["root", *aspects]
    v = vec(*(rng.random() for _ in range(3)))
    choice = rng.choice(["add_fact", "add_fact", "add_aspect", "remove", "update", "promote", "demote",
                         "group", "move", "supersede", "retire", "set_label", "raw"])
    if choice == "add_fact" or not facts:
        parent = rng.choice(containers)
        return lambda x: x.add_fact(parent, f"fact {step}", embedding=v, node_id=f"f{step}")
    fact = rng.choice(facts)
    if choice == "add_aspect":
        parent = rng.choice(containers)
        return lambda x: x.add_aspect(parent, f"aspect {step}", embedding=v, node_id=f"a{step}")
    if choice == "remove":
        return lambda x: x.remove(fact)
    if choice == "update":
        return lambda x: x.update_fact(fact, text=f"text {step}", embedding=v, metadata={"step": step})
    if choice == "promote":
        return lambda x: x.promote(fact)
    if choice == "demote":
        target = rng.choice(aspects or ["root"])
        return lambda x: x.demote(fact, target)
    if choice == "group":
        pair = rng.sample(facts, 2) if len(facts) > 1 else [fact, fact]
        return lambda x: x.group(pair, f"group {step}", node_id=f"g{step}", embedding=v)
    if choice == "move":
        target = rng.choice(containers)
        return lambda x: x.move(fact, target)
    if choice == "supersede":
        return lambda x: x.supersede(fact, f"new {step}", embedding=v)
    if choice == "retire":
        return lambda x: x.retire(fact)
    if choice == "set_label" and aspects:
        aspect = rng.choice(aspects)
        return lambda x: x.set_label(aspect, f"label {step}", embedding=v)
    return lambda x: x.keep_raw(f"r{step}", f"said {step}")


def _apply(write, tree):
    try:
        write(tree)
        return None
    except InvalidOperationError as exc:
        return type(exc)


@pytest.mark.parametrize("seed", range(4))
def test_a_family_of_copies_written_at_random_matches_deep_copies(seed):
    """Copies of copies, every member written in turn: each equals a node-by-node copy
    written the same way, after every write."""
    rng = random.Random(seed)
    family = [build()]
    refs = [build()]
    for step in range(300):
        if rng.random() < 0.08 and len(family) < 6:
            k = rng.randrange(len(family))
            family.append(family[k].copy())
            refs.append(refs[k].deep_copy())
            continue
        k = rng.randrange(len(family))
        write = _random_write(rng, refs[k], step)
        assert _apply(write, family[k]) == _apply(write, refs[k])
        for tree, ref in zip(family, refs):
            assert snapshot(tree) == snapshot(ref)
    for tree in family:
        tree.check_invariants()


def _canonical(rows: list[dict]) -> str:
    """The rows as JSON with each random id (32 hex digits) renamed by its first appearance,
    so that two runs building the same tree compare equal."""
    names: dict[str, str] = {}
    return re.sub(r"[0-9a-f]{32}", lambda m: names.setdefault(m.group(0), f"id{len(names)}"),
                  json.dumps(rows, sort_keys=True))


def _run_memory(monkeypatch, copy_method: str, texts: list[str]) -> tuple[str, int, dict]:
    """``texts`` through a memory (offline teacher, no background thread), tree copies made
    by ``copy_method``: the tree's rows without their times, the copies made, the counts."""
    monkeypatch.setattr(MembrainTree, "copy", getattr(MembrainTree, copy_method))
    copies = itertools.count()
    real_copy = MembrainTree.copy

    def counted(tree):
        next(copies)
        return real_copy(tree)

    monkeypatch.setattr(MembrainTree, "copy", counted)
    with MembrainMemory(embeddings=WordHashEmbeddings(), teacher=HeuristicTeacher(), background=False) as mem:
        for text in texts:
            mem.add(text, namespace="user")
        tree = mem.tree("user")
        tree.check_invariants()
        rows = _canonical([{k: v for k, v in row.items() if k not in ("created_at", "updated_at")}
                           for row in tree.to_dict()["nodes"]])
        rows = re.sub(r'"valid_(from|to)": [0-9.e+-]+', r'"valid_\1": 0', rows)  # times differ between runs
        stats = mem.stats()
    return rows, next(copies), {k: stats[k] for k in ("inserts", "teacher_calls") if k in stats}


def test_a_memory_builds_the_same_tree_with_copy_on_write_as_with_deep_copies(monkeypatch):
    lines = (REPO / "langchain_membrain" / "data" / "sample_conversation.jsonl").read_text().splitlines()
    texts = [json.loads(line)["text"] for line in lines if line.strip()][:150]
    cow = _run_memory(monkeypatch, "copy", texts)
    monkeypatch.undo()
    deep = _run_memory(monkeypatch, "deep_copy", texts)
    assert cow[1] > 10, "the run made too few copies to test them"
    assert cow == deep
