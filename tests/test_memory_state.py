"""State a memory holds (issue 44): a config given to it is never changed, and its teacher is
held in one place that every question reads (placement, stage 2, operation, naming)."""

from __future__ import annotations

import copy

import pytest
from helpers import WordEmbeddings

from langchain_membrain.insert.config import LearnerConfig
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.students.training_config import Policy
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.tree.operation_types import ADD


class Words16(WordEmbeddings):
    dimensions = 16


class Words32(WordEmbeddings):
    dimensions = 32


FACTS = ["Maya is allergic to peanuts", "Tom plays football on Saturdays", "Maya lives in Lisbon",
         "Tom is learning Japanese"]


def test_one_config_serves_two_memories_of_different_dimensions_and_is_never_changed():
    config = LearnerConfig()
    before = copy.deepcopy(config)
    with MembrainMemory(embeddings=Words16(), learner=config, device="cpu", background=False) as small, \
            MembrainMemory(embeddings=Words32(), learner=config, background=False) as large:
        small.add_many(FACTS[:2], namespace="a")
        assert small.search("peanuts", namespace="a")
        large.add_many(FACTS, namespace="b")
        assert large.search("football", namespace="b")
        small.add(FACTS[2], namespace="a")  # was DimensionError: the models read 32-d, got 16
        assert small.search("Lisbon", namespace="a")[0].value["content"] == FACTS[2]
        assert small._learner.config.model.dim == 16 and large._learner.config.model.dim == 32
        assert small._learner.config.training.device == "cpu"
    assert config == before
    assert config.model.dim == before.model.dim and config.batch is None and config.training.device is None


# ------------------------------------------------------------------ one owner for the teacher
class Recording(HeuristicTeacher):
    """The offline teacher, writing down each question it is asked, under its name."""

    def __init__(self, name: str, log: list[tuple[str, str]]):
        super().__init__()
        self.name, self.log = name, log

    def choose_stage1(self, new_fact, subtree):
        self.log.append((self.name, "stage1"))
        return super().choose_stage1(new_fact, subtree)

    def choose_stage2(self, tree, closure):
        self.log.append((self.name, "stage2"))
        return super().choose_stage2(tree, closure)

    def choose_operation(self, question):
        self.log.append((self.name, "operation"))
        return ADD

    def name_aspect(self, fact_texts):
        self.log.append((self.name, "naming"))
        return super().name_aspect(fact_texts)


# Enough alike facts for the tree to grow aspects, so that stage 1 has a choice to ask about.
GROWING = [f"Maya plays the piano on day {i}" for i in range(5)] + [f"Tom plays football on day {i}" for i in range(5)]
ALWAYS, NEVER = Policy(execute="teacher", query="always"), Policy(execute="model", query="never")
QUESTION_SETUPS = {
    # the joint question, asked by stage 1 (the teacher decides every insert)
    "placement": dict(learner=LearnerConfig(stage1=ALWAYS, stage2=ALWAYS), operations=False),
    # the joint question, asked by stage 2 (stage 1 decides alone, never asks)
    "stage2": dict(learner=LearnerConfig(stage1=NEVER, stage2=ALWAYS), operations=False),
    # every memory operation is the teacher's
    "operation": dict(learner=LearnerConfig(stage1=NEVER, stage2=NEVER), operations="teacher"),
    # aspects named as they are made and renamed as they grow (relabel)
    "naming": dict(learner=LearnerConfig(stage1=ALWAYS, stage2=ALWAYS), operations=False, naming_interval=1),
}


@pytest.mark.parametrize("kind", list(QUESTION_SETUPS))
def test_a_new_teacher_changes_who_answers_every_kind_of_question(kind):
    log: list[tuple[str, str]] = []
    with MembrainMemory(embeddings=WordEmbeddings(), teacher=Recording("old", log), background=False, prior=False,
                        **QUESTION_SETUPS[kind]) as mem:
        for fact in GROWING[:6]:  # the learner and the decider now exist, with the old teacher
            mem.add(fact, namespace="a")
        learner = mem._learner
        assert learner is not None
        unsure_before = dict(learner.ledger.unsure)
        named_before = learner.ledger.questions["naming"]
        new = Recording("new", log)
        mem.reconfigure(teacher=new)
        log.clear()
        for fact in GROWING[6:]:
            mem.add(fact, namespace="a")
        assert log and {name for name, _ in log} == {"new"}, log  # nothing asked of the old teacher
        if kind in ("placement", "stage2"):
            # the joint question (its answer: the teacher's descent and stage 2), asked by
            # the stage that was unsure
            stage = "stage1" if kind == "placement" else "stage2"
            assert learner.ledger.unsure[stage] > unsure_before.get(stage, 0)
            assert ("new", "stage2") in log
        else:
            assert ("new", kind) in log
        if kind == "naming":
            assert learner.ledger.questions["naming"] > named_before
        assert mem.teacher is new and learner.teacher is new and mem._operations.teacher is new


def test_a_new_teacher_is_resolved_and_refits_what_follows_from_it():
    """``reconfigure(teacher=None)`` is the offline teacher, as ``teacher=None`` is; a teacher that
    is not in-process lifts the trainer queue's bound (none of its audits is skipped)."""
    with MembrainMemory(embeddings=WordEmbeddings(), background=False) as mem:
        bounded = mem._bg.queue_bound
        slow = HeuristicTeacher()
        slow.fast = False  # type: ignore[attr-defined]
        mem.reconfigure(teacher=slow)
        assert mem._bg.queue_bound is None and bounded == mem.config.max_training_lag
        assert mem.reconfigure(teacher=None).teacher is None and mem.config.teacher is None
        assert isinstance(mem.teacher, HeuristicTeacher) and mem.teacher is not slow
        assert mem._bg.queue_bound == bounded
