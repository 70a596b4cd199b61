"""Random sequences of valid and invalid writes keep every invariant of the tree.

After each step: the shape is a tree with facts as leaves (check_invariants), every
aspect's mean embedding equals the mean of its facts (check_invariants, within 1e-5), each
fact's closure equals the definition recomputed naively, and a write that raised changed
nothing at all.
"""

import json

import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from langchain_membrain import MembrainError, MembrainTree

DIM = 3
vectors = st.one_of(
    st.none(),
    st.lists(st.floats(-4, 4, allow_nan=False, width=32), min_size=DIM, max_size=DIM).map(
        lambda xs: np.array(xs, dtype=np.float32)
    ),
)


def naive_closure(tree: MembrainTree, fact_id: str) -> list[tuple[str, str]]:
    """The closure from its definition, by scanning every node."""
    parent = tree.parent(fact_id)
    grand = tree.parent(parent)
    out = {(fact_id, "self"), (parent, "parent")}
    out |= {(n, "sibling") for n in tree.graph.nodes if n != fact_id and tree.parent(n) == parent}
    if grand is not None:
        out.add((grand, "grandparent"))
        out |= {(n, "uncle") for n in tree.graph.nodes if n != parent and tree.parent(n) == grand}
    return sorted(out)


class TreeMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.tree = MembrainTree("subject", dim=DIM)
        self.counter = 0

    # Ids are deterministic (never uuids) so that hypothesis can replay a run exactly.
    def ids(self, data, extra=("ghost",)):
        nodes = sorted(self.tree.graph.nodes) + list(extra)
        return data.draw(st.sampled_from(nodes))

    def attempt(self, write):
        """Run a write; if it raises a MembrainError, the tree must be unchanged."""
        before = json.dumps(self.tree.to_dict(), sort_keys=True)
        version = self.tree.version
        try:
            write()
        except MembrainError:
            assert self.tree.version == version
            assert json.dumps(self.tree.to_dict(), sort_keys=True) == before

    @rule(data=st.data(), emb=vectors)
    def add_fact(self, data, emb):
        parent = self.ids(data)
        self.counter += 1
        nid = f"f{self.counter}"
        self.attempt(lambda: self.tree.add_fact(parent, f"fact {nid}", embedding=emb, node_id=nid))

    @rule(data=st.data())
    def add_aspect(self, data):
        parent = self.ids(data)
        self.counter += 1
        self.attempt(lambda: self.tree.add_aspect(parent, "aspect", node_id=f"a{self.counter}"))

    @rule(data=st.data())
    def promote(self, data):
        node = self.ids(data)
        self.attempt(lambda: self.tree.promote(node))

    @rule(data=st.data())
    def demote(self, data):
        node, target = self.ids(data), self.ids(data)
        self.attempt(lambda: self.tree.demote(node, target))

    @rule(data=st.data())
    def group(self, data):
        nodes = data.draw(st.lists(st.sampled_from(sorted(self.tree.graph.nodes) + ["ghost"]), max_size=4))
        self.counter += 1
        self.attempt(lambda: self.tree.group(nodes, "group", node_id=f"g{self.counter}"))

    # Targeted rules, so that valid writes happen often, not only by chance.
    @rule(data=st.data(), emb=vectors)
    def add_fact_to_container(self, data, emb):
        containers = sorted(n for n in self.tree.graph.nodes if self.tree.node(n).kind != "fact")
        parent = data.draw(st.sampled_from(containers))
        self.counter += 1
        nid = f"f{self.counter}"
        self.attempt(lambda: self.tree.add_fact(parent, f"fact {nid}", embedding=emb, node_id=nid))

    @rule(data=st.data())
    def group_siblings(self, data):
        parents = sorted(p for p in self.tree.graph.nodes if len(self.tree.child_facts(p)) >= 2)
        if parents:
            facts = self.tree.child_facts(data.draw(st.sampled_from(parents)))
            chosen = data.draw(st.lists(st.sampled_from(facts), min_size=2, max_size=len(facts), unique=True))
            self.counter += 1
            self.attempt(lambda: self.tree.group(chosen, "group", node_id=f"g{self.counter}"))

    @rule(data=st.data())
    def demote_into_sibling(self, data):
        pairs = sorted(
            (n, s)
            for n in self.tree.graph.nodes
            if n != self.tree.root_id
            for s in self.tree.child_aspects(self.tree.parent(n))
            if s != n
        )
        if pairs:
            node, target = data.draw(st.sampled_from(pairs))
            self.attempt(lambda: self.tree.demote(node, target))

    @rule(data=st.data())
    def move(self, data):
        node, parent = self.ids(data), self.ids(data)
        self.attempt(lambda: self.tree.move(node, parent))

    @rule(data=st.data())
    def remove(self, data):
        node = self.ids(data)
        self.attempt(lambda: self.tree.remove(node))

    @rule(data=st.data(), emb=vectors)
    def update(self, data, emb):
        node = self.ids(data)
        self.attempt(lambda: self.tree.update_fact(node, text="updated", embedding=emb))

    # Memory operations: the archive beside the tree (history and the ignored log).
    @rule(data=st.data(), emb=vectors)
    def supersede(self, data, emb):
        node = self.ids(data)
        self.attempt(lambda: self.tree.supersede(node, "a newer version", embedding=emb, when=float(self.counter)))

    @rule(data=st.data())
    def retire(self, data):
        node = self.ids(data)
        self.attempt(lambda: self.tree.retire(node, when=float(self.counter)))

    @rule(emb=vectors)
    def log_ignored(self, emb):
        self.counter += 1
        self.attempt(lambda: self.tree.log_ignored(f"i{self.counter}", "thanks!", embedding=emb))

    @invariant()
    def tree_is_valid(self):
        self.tree.check_invariants(atol=1e-5)

    @invariant()
    def closures_match_definition(self):
        for f in self.tree.facts():
            got = sorted((m.node_id, m.role) for m in self.tree.closure(f).members)
            assert got == naive_closure(self.tree, f)

    @invariant()
    def round_trip(self):
        assert MembrainTree.from_dict(self.tree.to_dict()).to_dict() == self.tree.to_dict()

    @invariant()
    def copy_is_equal_and_independent(self):
        before = self.tree.to_dict()
        view = self.tree.copy()
        view.check_invariants(atol=1e-5)
        assert view.to_dict() == before
        for f in view.facts()[:1]:
            view.remove(f)  # a write to the copy never shows in the tree
        assert self.tree.to_dict() == before


TreeMachine.TestCase.settings = settings(
    max_examples=200, stateful_step_count=25, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestTreeMachine = TreeMachine.TestCase


class BoundedTreeMachine(TreeMachine):
    """The same writes on a tree with a height bound: a tree grown from empty never passes
    it, whichever write is tried, and a copy keeps the bound."""

    MAX_HEIGHT = 3

    def __init__(self):
        super().__init__()
        self.tree = MembrainTree("subject", dim=DIM, max_height=self.MAX_HEIGHT)

    @invariant()
    def never_deeper_than_the_bound(self):
        assert self.tree.height() <= self.MAX_HEIGHT
        assert self.tree.copy().max_height == self.MAX_HEIGHT


BoundedTreeMachine.TestCase.settings = TreeMachine.TestCase.settings
TestBoundedTreeMachine = BoundedTreeMachine.TestCase
