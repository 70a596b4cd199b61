"""The learned insert: the fact is never lost, whatever the teacher answers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from helpers import insert_by_teacher

from langchain_membrain.bench.bare_tree import insert_fact, place_fact
from langchain_membrain.errors import DimensionError
from langchain_membrain.insert.config import LearnerConfig
from langchain_membrain.insert.learner import Learner, teacher_forcing
from langchain_membrain.students.nets import ModelConfig
from langchain_membrain.students.training_config import Policy, StageTraining, TrainingConfig
from langchain_membrain.teachers.base import BaseTeacher, NewFact
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.tree.actions import Demote, Group, Promote
from langchain_membrain.tree.tree import MembrainTree

DIM = 16


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def facts(n: int, seed: int = 0) -> list[NewFact]:
    centers = np.random.default_rng(42).normal(size=(6, DIM))
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        v = centers[rng.integers(6)] / np.sqrt(DIM) * 2 + 0.3 * rng.normal(size=DIM) / np.sqrt(DIM)
        out.append(NewFact(f"fact {i}", (v / np.linalg.norm(v)).astype(np.float32), {"i": i}))
    return out


class GarbageTeacher(BaseTeacher):
    """Answers every question wrongly, in a different way each time."""

    def __init__(self):
        self.n = 0

    def choose_stage1(self, new_fact, subtree):
        self.n += 1
        return [99, -1, "1", None, 1.5, True, len(subtree.candidates)][self.n % 7]

    def choose_stage2(self, tree, closure):
        self.n += 1
        k = self.n % 6
        if k == 0:
            raise RuntimeError("teacher down")
        if k == 1:
            return [Promote("no-such-node")]
        if k == 2:
            return [Demote(closure.fact_id, closure.fact_id)]
        if k == 3:
            return [Group((closure.fact_id,))]
        if k == 4:
            return "not a list of actions"
        return [Promote(closure.parent_id)]  # an aspect: not allowed

    def name_aspect(self, fact_texts):
        return None


def config(execute="teacher", query="always") -> LearnerConfig:
    return LearnerConfig(model=ModelConfig(dim=DIM, d_model=32, heads=4),
                         training=TrainingConfig(stage1=StageTraining(batch_size=8), stage2=StageTraining(batch_size=4),
                                                 device="cpu"),
                         stage1=Policy(execute=execute, query=query), stage2=Policy(execute=execute, query=query))


@pytest.mark.parametrize("execute,query", [("teacher", "always"), ("auto", "uncertain"), ("model", "always")])
def test_a_garbage_teacher_never_loses_a_fact(execute, query):
    learner = Learner(GarbageTeacher(), config(execute, query))
    tree = MembrainTree("s", dim=DIM)
    ids = []
    for nf in facts(40):
        res = insert_fact(tree, learner, nf)
        assert res.fact_id in tree and tree.node(res.fact_id).kind == "fact"
        assert tree.parent(res.fact_id) == res.parent_id
        ids.append(res.fact_id)
    assert sorted(ids) == sorted(tree.facts())
    assert [tree.node(i).metadata["i"] for i in ids] == list(range(40))
    tree.check_invariants()
    # every answer was garbage: every question is a counted failure, nothing was learned from it
    asked = learner.ledger.questions["placement"] + learner.ledger.questions["audit"]
    assert asked > 0 and sum(learner.ledger.failures.values()) == asked
    assert learner.counters["stage1"].labelled == learner.counters["stage2"].labelled == 0


def test_a_good_teacher_is_followed_under_teacher_forcing():
    teacher = HeuristicTeacher()
    learner = Learner(teacher, config())
    tree = MembrainTree("s", dim=DIM)
    ref = MembrainTree("s", dim=DIM)
    ref_teacher = HeuristicTeacher()
    for nf in facts(40):
        res = insert_fact(tree, learner, nf)
        insert_by_teacher(ref, nf, ref_teacher)
        assert res.stage1_by in ("teacher", "forced")
        assert res.teacher_failures == 0
    # teacher forcing builds the teacher's own tree (same shape, same fact partition)
    def shape(t):
        return sorted(sorted(t.node(c).metadata["i"] for c in t.child_facts(n)) for n in [t.root_id, *t.aspects()])
    assert shape(tree) == shape(ref)


def test_place_then_supervise_on_a_changed_tree():
    """The tree changes between place and supervise (here: the aspect the fact was placed
    under loses all its facts and is pruned); supervise reads its own snapshot, and its
    corrections are re-validated when applied: they never fail nor bring a fact back."""
    teacher = HeuristicTeacher()
    learner = Learner(teacher, config())
    tree = MembrainTree("s", dim=DIM)
    for nf in facts(30):
        insert_fact(tree, learner, nf)
    learner.config = replace(learner.config, stage1=Policy(execute="model", query="always"),
                             stage2=Policy(execute="model", query="always"))
    for nf in facts(10, seed=1):
        rec = place_fact(tree, learner, nf)
        parent = tree.parent(rec.fact_id)
        for f in list(tree.child_facts(parent)):
            tree.remove(f)  # may prune the aspect and the record's nodes
        n = len(tree.facts())
        sup = learner.supervise(rec)
        decided = bool(rec.steps) or rec.stage2 is not None
        assert sup.teacher_calls == int(decided)  # audited on the snapshot taken before the attach
        learner.apply_corrections(tree, sup)
        assert rec.fact_id not in tree and len(tree.facts()) == n
        assert learner.supervise(rec).teacher_calls == 0  # a second call does nothing
    tree.check_invariants()


class RootTeacher(BaseTeacher):
    """Always "attach here" and never any action: everything belongs under the root."""

    def choose_stage1(self, new_fact, subtree):
        return 0

    def choose_stage2(self, tree, closure):
        return []

    def name_aspect(self, fact_texts):
        return "x"


def test_supervise_returns_corrections_that_insert_applies():
    tree = MembrainTree("s", dim=DIM)
    teacher = HeuristicTeacher()
    for nf in facts(40):
        insert_by_teacher(tree, nf, teacher)
    assert tree.aspects()
    learner = Learner(RootTeacher(), config("model", "always"))
    moved = 0
    for nf in facts(20, seed=2):
        res = insert_fact(tree, learner, nf)
        for c in res.corrections:
            # the untrained model descended; the teacher says "root": corrected and moved
            assert c.fact_id == res.fact_id and c.to_parent == tree.root_id
            assert tree.parent(res.fact_id) == tree.root_id == res.parent_id
            moved += 1
        if res.record.placed_under != tree.root_id and not res.corrections:
            # no correction only when stage 2 had already taken the fact elsewhere
            assert tree.parent(res.fact_id) != res.record.placed_under
    assert moved > 0
    tree.check_invariants()


def test_dimension_mismatch_is_a_typed_error():
    learner = Learner(HeuristicTeacher(), config())
    tree = MembrainTree("s", dim=DIM)
    with pytest.raises(DimensionError):
        insert_fact(tree, learner, NewFact("x", np.ones(DIM + 1, np.float32)))
    assert tree.facts() == []


@pytest.mark.parametrize("defer", [1, 3])
def test_stage2_defer_asks_once_per_k_unsure_decisions_under_a_parent(defer):
    """Stage 1 decided by the model, stage 2 always unsure (warm-up never reached): with
    stage2_defer=K the teacher is asked about a parent's stage 2 at the K-th unsure decision
    there; the ones before wait as Idle, and no fact is lost."""
    cfg = replace(config(), stage1=Policy(execute="model", audit_rate=0.0),  # no audits: every question is stage 2's
                  stage2=Policy(execute="auto", query="uncertain", warmup=10**6), stage2_defer=defer)
    learner = Learner(HeuristicTeacher(), cfg)
    tree = MembrainTree("s", dim=DIM)
    waited: dict[str, int] = {}
    ids = []
    for nf in facts(40):
        res = insert_fact(tree, learner, nf)
        ids.append(res.fact_id)
        if res.stage2_by == "forced" or res.record.stage2 is None:
            continue  # nothing to decide (a lone fact): never asked, never counted
        parent = res.record.placed_under
        if res.teacher_calls:
            assert waited.pop(parent, 0) == defer - 1
        else:
            assert res.actions == []  # a waiting decision executes nothing
            waited[parent] = waited.get(parent, 0) + 1
            assert waited[parent] < defer
    assert sorted(ids) == sorted(tree.facts())
    tree.check_invariants()
    assert learner.ledger.questions["placement"] > 0



def test_stage2_questions_calibrate_stage1_but_not_the_reverse():
    """A question asked because stage 2 was unsure finds stage 1 sure at every level: its
    stage-1 labels are a sample of what stage 1's gate let through, and join its
    calibration window. A question asked because stage 1 was unsure never reached stage
    2's gate: its stage-2 decision does not join stage 2's window. (Warm-up is over from
    the start; a confidence bar above 1 keeps a stage unsure.)"""
    sure = Policy(execute="auto", confidence=0.0, warmup=0, audit_rate=0.0)
    unsure = Policy(execute="auto", confidence=1.01, warmup=0, audit_rate=0.0)

    def run(stage1: Policy, stage2: Policy) -> Learner:
        cfg = replace(config(), stage1=stage1, stage2=stage2)
        learner = Learner(HeuristicTeacher(), cfg)
        tree = MembrainTree("s", dim=DIM)
        for nf in facts(40):
            insert_fact(tree, learner, nf)
        assert tree.fact_count(tree.root_id) == 40
        return learner

    learner = run(sure, unsure)
    assert learner.ledger.unsure["stage2"] > 0 and learner.ledger.unsure["stage1"] == 0
    assert len(learner.trainer.calib["stage1"].rows) > 0
    assert len(learner.trainer.decision_calib.rows) == 0

    learner = run(unsure, sure)
    assert learner.ledger.unsure["stage1"] > 0 and learner.ledger.unsure["stage2"] == 0
    assert len(learner.trainer.calib["stage1"].rows) == 0
    assert len(learner.trainer.decision_calib.rows) == 0

def test_stage2_defer_must_be_a_positive_int():
    with pytest.raises(ValueError):
        LearnerConfig(stage2_defer=0)


class RepeatingTeacher(BaseTeacher):
    """Descends into the deepest aspect, groups every fact of the parent, and names every
    group after the top-level aspect ("knee"): a label its grandparent already holds."""

    def choose_stage1(self, new_fact, subtree):
        return 1 if len(subtree.candidates) > 1 else 0

    def choose_stage2(self, tree, closure):
        facts = tuple(tree.child_facts(closure.parent_id))
        return [Group(facts, label="knee")] if len(facts) >= 2 else []

    def name_aspect(self, fact_texts):
        return "knee"


def test_a_new_aspect_never_repeats_an_ancestors_label():
    tree = MembrainTree("s", dim=DIM)
    knee = tree.add_aspect(tree.root_id, "knee")
    physio = tree.add_aspect(knee, "physio")
    learner = Learner(RepeatingTeacher(), config())
    for nf in facts(3):
        insert_fact(tree, learner, nf)
    groups = tree.child_aspects(physio)
    assert groups, "the teacher's Group was applied under physio"
    for g in groups:
        assert tree.node(g).text.casefold() not in {"knee", "physio"}


class AspectMover(BaseTeacher):
    """Attaches at the root and promotes the aspect "b" (under "a") to the root: a move of a
    whole aspect, which only an executor with allow_aspects carries out."""

    def choose_stage1(self, new_fact, subtree):
        return 0

    def choose_stage2(self, tree, closure):
        return [Promote("b")] if "b" in tree and tree.parent("b") == "a" else []

    def name_aspect(self, fact_texts):
        return "x"


@pytest.mark.parametrize("allow_aspects", [False, True])
def test_a_teachers_aspect_move_is_its_answer_and_the_executor_decides(allow_aspects):
    """The joint answer of a teacher that moves an aspect is not refused: the fact goes where
    the teacher says, and the move is carried out only with allow_aspects."""
    tree = MembrainTree("s", dim=DIM)
    a = tree.add_aspect(tree.root_id, "a", node_id="a")
    b = tree.add_aspect(a, "b", node_id="b")
    for i, nf in enumerate(facts(4)):
        tree.add_fact(b if i % 2 else a, nf.text, embedding=nf.embedding)
    learner = teacher_forcing(AspectMover(), DIM, allow_aspects=allow_aspects)
    res = insert_fact(tree, learner, facts(1, seed=3)[0])
    assert res.stage1_by == "teacher" and res.teacher_failures == 0
    assert tree.parent(res.fact_id) == tree.root_id
    assert tree.parent("b") == (tree.root_id if allow_aspects else "a")
    tree.check_invariants()
