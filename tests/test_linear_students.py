"""The linear students beside the networks (students.LinearStage1, students.LinearIdle):
they follow a teacher's rule within tens of labels, decide only behind their own gates,
and travel in checkpoints."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from helpers import small_learner, small_trainer

from langchain_membrain.insert.decisions import second_opinion
from langchain_membrain.students.features import S1, STAGE1_NUM, STAGE2_NUM, Stage1Features
from langchain_membrain.students.linear import LinearIdle, LinearStage1

pytestmark = pytest.mark.usefixtures("one_torch_thread")
DIM = 16


def level(rng: np.random.Generator, n_candidates: int = 4) -> tuple[Stage1Features, int]:
    """A stage-1 level whose teacher picks the candidate with the highest ``cos_label``
    (a rule the offline prior never learned): features random, the target follows them."""
    t = n_candidates + 1
    num = rng.normal(size=(t, STAGE1_NUM)).astype(np.float32) * 0.1
    num[1:, S1["cos_label"]] = rng.uniform(-1, 1, size=n_candidates)
    target = int(np.argmax(num[1:, S1["cos_label"]]))
    zeros = np.zeros((t, DIM), np.float32)
    return Stage1Features(zeros, zeros, np.zeros(t, np.int64), np.zeros(t, np.int64), num, n_candidates), target


def test_the_linear_stage1_student_follows_a_new_rule_within_tens_of_labels():
    rng = np.random.default_rng(0)
    student = LinearStage1(STAGE1_NUM, gate=0.9)
    for _ in range(80):
        feats, target = level(rng)
        student.observe(feats, target, calibrate_every=16)
    assert student.calib.fitted and student.labelled == 80
    held_out = [level(rng) for _ in range(200)]
    right = [int(np.argmax(student.logits(f))) == y for f, y in held_out]
    assert np.mean(right) > 0.9
    sure = [ok for (f, _), ok in zip(held_out, right) if student.confidence(student.logits(f)) >= 0.9]
    assert len(sure) > 50 and np.mean(sure) >= 0.9  # what its gate lets through is right at the gate's rate


def test_where_the_network_is_unsure_the_linear_student_decides_once_its_gate_is_fitted():
    rng = np.random.default_rng(1)
    learner = small_learner(DIM)
    feats, target = level(rng)
    assert second_opinion(learner.trainer, learner.config, feats, 0, 0.3) == (0, 0.3)  # nothing fitted: the network's
    for _ in range(100):  # labels of a new teacher, observed as supervise() does
        f, y = level(rng)
        learner.trainer.observe_stage1(f, y, learner.trainer.predict_stage1(f), calibrate=False)
    taken = [second_opinion(learner.trainer, learner.config, f, -1, 0.3) for f, _ in (level(rng) for _ in range(50))]
    alone = [c for c, conf in taken if c != -1]
    assert alone and all(conf >= 0.9 for c, conf in taken if c != -1)


def closure(rng: np.random.Generator, crowded: bool) -> SimpleNamespace:
    """The two attributes LinearIdle reads of Stage2Features: the focal fact's row."""
    num = rng.normal(size=(3, STAGE2_NUM)) * 0.1
    num[0, 0] = 1.0 if crowded else -1.0
    return SimpleNamespace(num=num, fact_tok=np.array([0]))


def test_the_idle_gate_opens_on_fair_rows_only_and_shuts_when_they_stop_agreeing():
    rng = np.random.default_rng(2)
    idle = LinearIdle(STAGE2_NUM, gate=0.9)
    for _ in range(200):  # the teacher tidies crowded parents only; rows asked because stage 2 was unsure
        c = bool(rng.random() < 0.5)
        idle.observe(closure(rng, c), not c, gate_row=False)
    assert not idle.open and len(idle.rows) == 0  # learned, but no fair sample of its gate yet
    assert idle.prob(closure(rng, False)) > 0.9 > idle.prob(closure(rng, True))
    for _ in range(60):
        c = bool(rng.random() < 0.5)
        idle.observe(closure(rng, c), not c, gate_row=True)
    assert idle.open and idle.sure(idle.prob(closure(rng, False))) and not idle.sure(idle.prob(closure(rng, True)))
    for _ in range(40):  # the teacher now tidies everywhere: what the gate lets through is wrong
        idle.observe(closure(rng, False), False, gate_row=True)
    assert not idle.open


def test_checkpoints_carry_the_linear_students_and_an_older_one_resets_them():
    rng = np.random.default_rng(3)
    trainer = small_trainer(DIM)
    for _ in range(40):
        f, y = level(rng)
        trainer.observe_stage1(f, y, trainer.predict_stage1(f), calibrate=False)
    trainer.idle2.observe(closure(rng, False), True, gate_row=True)
    other = small_trainer(DIM)
    other.load_bytes(trainer.state_bytes())
    assert np.array_equal(other.linear1.w, trainer.linear1.w) and other.linear1.calib.fitted
    assert np.array_equal(other.idle2.w, trainer.idle2.w) and list(other.idle2.rows) == list(trainer.idle2.rows)
    other.linear1.load(None)  # a checkpoint from before the linear students
    other.idle2.load({"weights": [float("nan")] * (STAGE2_NUM + 1), "rows": [], "labelled": 1})
    assert not other.linear1.w.any() and not other.linear1.calib.fitted and not other.idle2.w.any()
