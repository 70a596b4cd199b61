"""Stage 1's attach-here student (students.AttachHere): a teacher's rare "attach here" is
learnt from a handful of labels, proposed where the networks would descend, and left to the
teacher to confirm until the student's own stops have agreed at the gate."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import small_learner, small_trainer

from langchain_membrain.insert.decisions import attach_here
from langchain_membrain.students.features import (
    ATTACH_HERE_COLUMNS,
    S1,
    STAGE1_NUM,
    Stage1Features,
    attach_here_row,
)
from langchain_membrain.students.linear import AttachHere

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DIM = 16
COL = {c: i for i, c in enumerate(ATTACH_HERE_COLUMNS)}


def level(best: float, here: float, share: float, depth: int = 1, n_candidates: int = 4) -> Stage1Features:
    """A level whose best child (token 2) has affinity ``best`` and ``share`` of the current
    node's facts, the current node (token 1) affinity ``here``."""
    t = n_candidates + 1
    num = np.zeros((t, STAGE1_NUM), np.float32)
    num[1, S1["best_aff"]], num[1, S1["cur_aff"]] = best, here
    num[1, S1[f"depth={depth}"]] = 1.0
    num[2, S1["is_best_aff"]], num[2, S1["share_of_facts"]] = 1.0, share
    zeros = np.zeros((t, DIM), np.float32)
    return Stage1Features(zeros, zeros, np.zeros(t, np.int64), np.zeros(t, np.int64), num, n_candidates)


def balance_rule(rng: np.random.Generator) -> tuple[Stage1Features, bool]:
    """A level and the offline teacher's balance bar on it: attach here unless the best child
    fits better than the rest of the node by 0.05 times its odds; about one level in 20 stops."""
    share = float(rng.uniform(0.05, 0.6))
    rest = float(rng.uniform(0.1, 0.4))
    best = rest + float(rng.uniform(0.0, 0.4))
    here = share * best + (1 - share) * rest
    return level(best, here, share), best - rest < 0.05 * share / (1 - share)


def test_the_row_reads_the_fit_to_the_rest_of_the_node_and_the_best_childs_odds():
    row = attach_here_row(level(best=0.5, here=0.35, share=0.5))
    assert row[COL["rest_aff"]] == pytest.approx(0.2, abs=1e-6)  # (0.35 - 0.5 * 0.5) / 0.5
    assert row[COL["best_minus_rest"]] == pytest.approx(0.3, abs=1e-6)
    assert row[COL["best_odds"]] == pytest.approx(0.1)  # odds 1, over 10
    alone = attach_here_row(level(best=0.5, here=0.5, share=1.0))  # nothing beside the best child
    assert alone[COL["rest_aff"]] == pytest.approx(0.5) and alone[COL["best_odds"]] == pytest.approx(2.0)


def test_a_rare_stop_is_learnt_from_a_few_dozen_labels():
    rng = np.random.default_rng(0)
    student = AttachHere()
    labels = [balance_rule(rng) for _ in range(600)]
    for feats, stop in labels:
        student.observe(feats, stop)
    assert student.ready and 10 <= sum(s for _, s in labels) <= 60  # a rare class
    held_out = [balance_rule(rng) for _ in range(3000)]
    said = np.array([student.balanced(f) >= 0.5 for f, _ in held_out])
    truth = np.array([s for _, s in held_out])
    assert (said & truth).sum() / truth.sum() >= 0.8  # recall of the rare class
    assert (said & truth).sum() / said.sum() >= 3 * truth.mean()  # the price of balance: false stops, a few
    assert all(0.0 <= student.prob(f) <= student.balanced(f) for f, _ in held_out[:50])  # stops are the minority


def test_nothing_is_answered_before_both_classes_were_seen():
    student = AttachHere(min_each=5)
    for _ in range(50):
        student.observe(level(0.5, 0.3, 0.3), False)
    assert not student.ready


def test_the_learner_proposes_the_students_stop_and_leaves_it_to_the_teacher_until_its_stops_agreed():
    rng = np.random.default_rng(1)
    learner = small_learner(DIM)
    stop_level, go_level = level(0.30, 0.29, 0.5), level(0.7, 0.3, 0.2)
    logits = np.array([-5.0, 5.0, 0.0, 0.0])  # the networks: go down into candidate 1, sure
    assert attach_here(learner.trainer, learner.config, stop_level, logits, 1, 0.99) == (1, 0.99)  # not fitted: the networks'
    for _ in range(400):
        f, y = balance_rule(rng)
        learner.trainer.observe_stage1(f, 0 if y else 1, learner.trainer.predict_stage1(f), calibrate=False)
    gate = learner.config.stage1.confidence
    choice, conf = attach_here(learner.trainer, learner.config, stop_level, logits, 1, 0.99)
    assert choice == 0 and conf < gate  # proposed, and asked: its stops have not agreed at the gate yet
    choice, conf = attach_here(learner.trainer, learner.config, go_level, logits, 1, 0.99)
    assert choice == 1 and conf == pytest.approx(min(0.99, 1 - learner.trainer.attach.prob(go_level)))
    choice, _ = attach_here(learner.trainer, learner.config, go_level, np.array([5.0, 1.0, 2.0, 0.0]), 0, 0.99)
    assert choice == 2  # the networks stopped, the student goes down: into their best child
    learner.trainer.attach.stops_proposed.clear()
    learner.trainer.attach.stops_proposed.extend([True] * 40)  # its stops now agree with the teacher's
    assert attach_here(learner.trainer, learner.config, stop_level, logits, 1, 0.99)[1] == pytest.approx(
        learner.trainer.attach.prob(stop_level))


def test_checkpoints_carry_the_students_window_and_an_older_one_starts_it_afresh():
    rng = np.random.default_rng(2)
    trainer = small_trainer(DIM)
    for _ in range(300):
        f, y = balance_rule(rng)
        trainer.observe_stage1(f, 0 if y else 1, trainer.predict_stage1(f), calibrate=False)
    trainer.attach.fit()  # a loaded student is fitted on its whole window
    assert trainer.attach.ready
    other = small_trainer(DIM)
    other.load_bytes(trainer.state_bytes())
    probe = level(0.31, 0.29, 0.4)
    assert other.attach.ready and other.attach.prob(probe) == pytest.approx(trainer.attach.prob(probe))
    other.attach.load(None)  # a checkpoint from before the student
    assert not other.attach.ready and not other.attach.rows
