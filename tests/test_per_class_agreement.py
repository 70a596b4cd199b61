"""Per-class agreement of the student's own decisions with a shadow teacher
(``stats()["shadow_per_class"]``, ``Learner.shadow_scores``): stage 1's "stop", stage 2's
Idle and each action kind, counted on the decisions the student executed alone."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from helpers import WordEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.bench.bare_tree import insert_fact
from langchain_membrain.insert.config import LearnerConfig
from langchain_membrain.insert.learner import Learner
from langchain_membrain.insert.stats import LearningStats
from langchain_membrain.students.decoding import action_key
from langchain_membrain.students.shadow import SHADOW_CLASSES
from langchain_membrain.students.training_config import Policy
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.tree.placement import NewFact
from langchain_membrain.tree.tree import MembrainTree

TOPICS = ["my dog {} likes the park", "my sister {} plays the cello", "we hiked {} mountain trail",
          "I cooked {} curry for dinner", "my job at {} starts monday", "the garden {} roses bloomed"]
WORDS = ["rex", "mila", "ben", "pumpkin", "acme", "luna", "jo", "snowdon", "lentil", "globex", "kiwi", "ash"]
TEXTS = [t.format(w) for w in WORDS for t in TOPICS]  # 72 distinct facts, topics interleaved


class StopAndIdle(HeuristicTeacher):
    """A shadow that always attaches here and never tidies: against it, stage 1's agreement
    is exactly its "stop" agreement, and stage 2's exactly its Idle agreement."""

    def choose_stage1(self, new_fact, subtree) -> int:
        return 0

    def choose_stage2(self, tree, closure):
        return []


def _run(shadow, learner: LearnerConfig) -> tuple[dict, dict, list]:
    """The texts inserted through the insert graph on a bare tree (bench.bare_tree.insert_fact) by a
    learner with ``shadow``: (per-class counts, pooled agreement, every insert's record)."""
    emb = WordEmbeddings()
    learner = replace(learner, model=replace(learner.model, dim=emb.dimensions))
    student = Learner(HeuristicTeacher(), learner, shadow=shadow)
    tree = MembrainTree("alice", dim=emb.dimensions)
    records = [insert_fact(tree, student, NewFact(t, np.asarray(emb.embed_query(t), np.float32))).record
               for t in TEXTS]
    pooled = {k: {"agreed": a, "decisions": n, "rate": a / n if n else None}
              for k, (a, n) in student.shadow_scores.agreement.items()}
    return student.shadow_scores.per_class(), pooled, records


def _recount(records: list) -> Counter:
    """The per-class counts, recomputed from the decisions recorded: stage-1 levels and
    stage-2 series the student executed alone (``by == "model"``), each with the shadow's."""
    c: Counter = Counter()
    for rec in records:
        for step in rec.steps:
            if step.by == "model" and step.shadow_choice is not None:
                mine, theirs = step.executed == 0, step.shadow_choice == 0
                c["stage1", "stop", "student"] += mine
                c["stage1", "stop", "shadow"] += theirs
                c["stage1", "stop", "agreed"] += mine and theirs
        dec = rec.stage2
        if dec is not None and dec.by == "model" and dec.shadow_actions is not None:
            mine, theirs = {action_key(a) for a in dec.executed}, {action_key(a) for a in dec.shadow_actions}
            for kind in ("promote", "demote", "group"):
                m, t = {k for k in mine if k[0] == kind}, {k for k in theirs if k[0] == kind}
                c["stage2", kind, "student"] += len(m)
                c["stage2", kind, "shadow"] += len(t)
                c["stage2", kind, "agreed"] += len(m & t)
            c["stage2", "idle", "student"] += not mine
            c["stage2", "idle", "shadow"] += not theirs
            c["stage2", "idle", "agreed"] += not mine and not theirs
    return c


def _check_shape(per_class: dict) -> None:
    assert {s: set(v) for s, v in per_class.items()} == {s: set(v) for s, v in SHADOW_CLASSES.items()}
    for stage in per_class.values():
        for v in stage.values():
            assert 0 <= v["agreed"] <= min(v["shadow"], v["student"])
            assert v["recall"] == (v["agreed"] / v["shadow"] if v["shadow"] else None)
            assert v["precision"] == (v["agreed"] / v["student"] if v["student"] else None)


def _config(stage1: Policy, stage2: Policy) -> LearnerConfig:
    return LearnerConfig(stage1=stage1, stage2=stage2)


# Who decides in each run: the student's stage 1 alone and the teacher's stage 2 (stops by a
# student that has not learned them yet); stage 1 gated and the student's stage 2 alone; both
# gated (stage 2's gate lowered so that the student takes some of its decisions alone).
CONFIGS = {
    "stage1 alone": lambda: _config(Policy(execute="model"), Policy(execute="teacher")),
    "stage2 alone": lambda: _config(Policy(warmup=16), Policy(execute="model")),
    "both gated": lambda: _config(Policy(warmup=16), Policy(warmup=16, confidence=0.5)),
}


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("who", ["stage1 alone", "stage2 alone"])
def test_against_a_shadow_that_always_stops_and_idles(who):
    """The shadow's answer is always the rare class, so the per-class counts of the
    student's own decisions must equal the pooled agreement's."""
    per_class, pooled, records = _run(StopAndIdle(), CONFIGS[who]())
    _check_shape(per_class)
    stop, idle = per_class["stage1"]["stop"], per_class["stage2"]["idle"]
    assert stop["shadow"] == pooled["stage1"]["decisions"]  # the shadow stops at every level
    assert stop["agreed"] == stop["student"] == pooled["stage1"]["agreed"]
    assert stop["recall"] == pooled["stage1"]["rate"]
    assert idle["shadow"] == pooled["stage2"]["decisions"]  # ... and is Idle at every closure
    assert idle["agreed"] == idle["student"] == pooled["stage2"]["agreed"]
    alone2 = [r.stage2 for r in records if r.stage2 is not None and r.stage2.by == "model"]
    assert idle["shadow"] == len(alone2)
    executed = Counter(action_key(a)[0] for d in alone2 for a in d.executed)
    for kind in ("promote", "demote", "group"):
        assert per_class["stage2"][kind]["shadow"] == per_class["stage2"][kind]["agreed"] == 0
        assert per_class["stage2"][kind]["recall"] is None
        assert per_class["stage2"][kind]["student"] == executed[kind]
    if who == "stage1 alone":  # a student that never (or always) stopped would check nothing
        assert 0 < stop["student"] < stop["shadow"]
        assert idle["shadow"] == 0 and any(r.stage2 is not None and r.stage2.by == "teacher" for r in records)
    else:
        assert idle["shadow"] > 0


@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.parametrize("who", ["stage1 alone", "both gated"])
def test_counts_the_students_own_decisions_only(who):
    """With the real offline teacher as shadow, the counts are those of the decisions the
    student took alone, recomputed from the records; decisions sent to the teacher are left
    out."""
    per_class, pooled, records = _run(HeuristicTeacher(), CONFIGS[who]())
    _check_shape(per_class)
    recount = _recount(records)
    for stage, classes in SHADOW_CLASSES.items():
        for cls in classes:
            for outcome in ("shadow", "student", "agreed"):
                assert per_class[stage][cls][outcome] == recount[stage, cls, outcome], (stage, cls, outcome)
    assert per_class["stage2"]["idle"]["shadow"] == sum(
        r.stage2 is not None and r.stage2.by == "model" and not r.stage2.shadow_actions for r in records)
    if who == "stage1 alone":  # stops on both sides, some of them agreed
        stop = per_class["stage1"]["stop"]
        assert stop["shadow"] > 0 and stop["student"] > 0 and stop["agreed"] > 0
    else:  # the shadow acted where the student decided alone, and some decisions went to the teacher
        assert pooled["stage2"]["decisions"] > 0
        assert sum(per_class["stage2"][k]["shadow"] for k in ("promote", "demote", "group")) > 0
        assert any(r.stage2 is not None and r.stage2.by == "teacher" for r in records)
        assert any(s.by != "model" for r in records for s in r.steps)


@pytest.mark.usefixtures("one_torch_thread")
def test_stats_report_the_per_class_counts():
    """Through a memory: stats() reports the per-class counts beside the pooled agreement,
    the typed view and the flat one agree, and they survive a checkpoint's JSON."""
    with MembrainMemory(embeddings=WordEmbeddings(), background=False, prior=False, operations=False,
                        relabel=False, learner=CONFIGS["both gated"](), shadow_teacher=HeuristicTeacher()) as mem:
        mem.add_many(TEXTS, namespace="alice")
        stats = mem.stats()
    per_class, pooled = stats["shadow_per_class"], stats["shadow_agreement"]
    _check_shape(per_class)
    assert per_class["stage1"]["stop"]["shadow"] <= pooled["stage1"]["decisions"]
    assert per_class["stage2"]["idle"]["shadow"] <= pooled["stage2"]["decisions"]
    assert sum(v["student"] for v in per_class["stage2"].values()) >= pooled["stage2"]["decisions"] > 0
    assert stats.learning.shadow_per_class == per_class
    saved = json.loads(json.dumps(stats.as_dict()))
    assert LearningStats.from_mapping(saved).shadow_per_class == per_class


def test_no_shadow_no_per_class():
    with MembrainMemory(embeddings=WordEmbeddings(), background=False, prior=False, operations=False) as mem:
        mem.add_many(TEXTS[:6], namespace="alice")
        assert "shadow_per_class" not in mem.stats()
