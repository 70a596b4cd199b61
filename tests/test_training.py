"""Online imitation: learning really happens, checkpoints, policies, calibration."""

from __future__ import annotations

import io
from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers import insert_by_teacher

from langchain_membrain.bench.bare_tree import insert_fact, place_fact
from langchain_membrain.errors import CheckpointError
from langchain_membrain.insert.config import LearnerConfig
from langchain_membrain.insert.decisions import stage2_feats
from langchain_membrain.insert.learner import Learner
from langchain_membrain.students.calibration import Calibrator
from langchain_membrain.students.features import stage1_features
from langchain_membrain.students.nets import ModelConfig
from langchain_membrain.students.training import OnlineTrainer
from langchain_membrain.students.training_config import Policy, StageTraining, TrainingConfig
from langchain_membrain.teachers.base import BaseTeacher, NewFact, Subtree
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.tree.placement import descend
from langchain_membrain.tree.tree import MembrainTree

DIM = 16


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def synthetic_facts(n: int, seed: int, k: int = 10, noise: float = 0.45, topics_seed: int = 1234) -> list[NewFact]:
    """Facts around ``k`` topic directions (fixed by ``topics_seed``, whatever ``seed``)."""
    centers = np.random.default_rng(topics_seed).normal(size=(k, DIM))
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        c = rng.integers(k)
        v = centers[c] / np.linalg.norm(centers[c]) + noise * rng.normal(size=DIM) / np.sqrt(DIM)
        out.append(NewFact(f"topic{c} fact {seed}-{i}", (v / np.linalg.norm(v)).astype(np.float32)))
    return out


class CountingTeacher(BaseTeacher):
    """The heuristic teacher, counting the questions it is asked."""

    def __init__(self):
        self.inner = HeuristicTeacher()
        self.stage1_calls = 0
        self.stage2_calls = 0

    def choose_stage1(self, new_fact, subtree):
        self.stage1_calls += 1
        return self.inner.choose_stage1(new_fact, subtree)

    def choose_stage2(self, tree, closure):
        self.stage2_calls += 1
        return self.inner.choose_stage2(tree, closure)

    def name_aspect(self, fact_texts):
        return self.inner.name_aspect(fact_texts)


def small_config(**policy) -> LearnerConfig:
    return LearnerConfig(
        model=ModelConfig(dim=DIM, d_model=32, heads=4, layers=1),
        training=TrainingConfig(stage1=StageTraining(batch_size=8, steps_per_batch=4, lr=1e-2, skip_lr=1e-1,
                                                     replay_batch=24),
                                stage2=StageTraining(batch_size=4, steps_per_batch=4, replay_batch=16),
                                device="cpu"),
        stage1=Policy(**policy) if policy else Policy(execute="teacher", query="always"),
        stage2=Policy(**policy) if policy else Policy(execute="teacher", query="always"),
    )


def eval_decisions(n_tree: int = 120, n_eval: int = 40) -> list:
    """Stage-1 decisions of the teacher on a teacher-built tree: (features, label)."""
    teacher = HeuristicTeacher()
    tree = MembrainTree("s", dim=DIM)
    for nf in synthetic_facts(n_tree, seed=7):
        insert_by_teacher(tree, nf, teacher)
    out = []
    # half the new facts are on known topics, half on unseen ones; with 16-d topic directions
    # both mostly descend, and a tree of 120 facts has aspects deep enough that some
    # descents stop at an aspect ("attach here"), so both kinds of decision are represented
    new = synthetic_facts(n_eval // 2, seed=8) + synthetic_facts(n_eval // 2, seed=9, topics_seed=99)
    for nf in new:
        def choose(sub: Subtree, nf=nf) -> int:
            label = teacher.choose_stage1(nf, sub)
            out.append((stage1_features(tree, nf, sub, max_facts=8), label))
            return label
        descend(tree, nf, choose)
    return [d for d in out if d[0].n_candidates > 1]


def agreement(learner: Learner, decisions) -> float:
    """The share of the teacher's decisions the model's argmax takes."""
    return float(np.mean([int(np.argmax(learner.trainer.predict_stage1(f))) == y for f, y in decisions]))


@pytest.fixture(scope="module")
def trained():
    """A learner trained by teacher forcing on 150 synthetic facts, and held-out decisions."""
    torch.manual_seed(0)
    decisions = eval_decisions()
    learner = Learner(HeuristicTeacher(), small_config())
    before = agreement(learner, decisions)
    tree = MembrainTree("s", dim=DIM)
    for nf in synthetic_facts(150, seed=1):
        insert_fact(tree, learner, nf)
    learner.trainer.flush()
    return learner, decisions, before, tree


def test_learning_happens(trained):
    learner, decisions, before, tree = trained
    after = agreement(learner, decisions)
    assert len(decisions) >= 40
    assert 0 < sum(y == 0 for _, y in decisions) < len(decisions)  # both kinds of decision
    assert after >= 0.7, (before, after)
    assert after >= before + 0.15, (before, after)
    c1, c2 = learner.counters["stage1"], learner.counters["stage2"]
    assert c1.steps > 0 and c2.steps > 0 and c1.labelled > 0 and c2.labelled > 0
    tree.check_invariants()


def test_checkpoint_round_trip_gives_identical_decisions(trained, tmp_path):
    learner, decisions, _, _ = trained
    fresh = Learner(HeuristicTeacher(), small_config())
    path = tmp_path / "ckpt.pt"
    learner.save(path)
    fresh.load(path)
    # A loaded checkpoint runs in numpy until it trains (nets.py): the same logits to
    # float32 rounding, the same decisions; in torch, the very same logits.
    assert not fresh.trainer.torch_built
    for f, _ in decisions:
        got, want = fresh.trainer.predict_stage1(f), learner.trainer.predict_stage1(f)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
        assert np.argmax(got) == np.argmax(want)
    assert not fresh.trainer.torch_built
    fresh.trainer.stage1  # noqa: B018 - builds the torch networks from the loaded state
    for f, _ in decisions:
        np.testing.assert_array_equal(fresh.trainer.predict_stage1(f), learner.trainer.predict_stage1(f))
    assert fresh.counters["stage1"].labelled == learner.counters["stage1"].labelled
    assert fresh.trainer.calib["stage1"].temperature == learner.trainer.calib["stage1"].temperature
    # bytes form (for a database)
    other = Learner(HeuristicTeacher(), small_config())
    other.load_bytes(learner.state_bytes())
    for f, _ in decisions[:5]:
        np.testing.assert_allclose(other.trainer.predict_stage1(f), learner.trainer.predict_stage1(f),
                                   rtol=1e-5, atol=1e-5)
    # written again without torch (nothing trained since), it is the same checkpoint
    third = Learner(HeuristicTeacher(), small_config())
    third.load_bytes(other.state_bytes())
    assert not other.trainer.torch_built
    third.trainer.stage1  # noqa: B018
    for f, _ in decisions[:5]:
        np.testing.assert_array_equal(third.trainer.predict_stage1(f), learner.trainer.predict_stage1(f))
    # the optimiser state travels too: one more identical step keeps them identical
    assert other.trainer.opt1.state_dict()["state"].keys() == learner.trainer.opt1.state_dict()["state"].keys()


def _params(learner: Learner) -> list[torch.Tensor]:
    return [p.detach().clone() for p in learner.trainer.stage1.parameters()] + \
           [p.detach().clone() for p in learner.trainer.stage2.parameters()]


def test_bad_checkpoints_raise_and_leave_the_model_untouched(trained, tmp_path):
    learner, decisions, _, _ = trained
    before = _params(learner)
    counters = learner.counters["stage1"].labelled

    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(learner.state_bytes()[:200] + b"garbage")
    with pytest.raises(CheckpointError):
        learner.load(corrupt)
    with pytest.raises(CheckpointError):
        learner.load_bytes(b"not a checkpoint at all")
    with pytest.raises(CheckpointError):
        learner.load(tmp_path / "missing.pt")

    other_dims = Learner(HeuristicTeacher(), LearnerConfig(model=ModelConfig(dim=DIM, d_model=16, heads=2)))
    with pytest.raises(CheckpointError, match="other dimensions"):
        learner.load_bytes(other_dims.state_bytes())
    other_embed = Learner(HeuristicTeacher(), LearnerConfig(model=ModelConfig(dim=DIM * 2, d_model=32, heads=4)))
    with pytest.raises(CheckpointError):
        learner.load_bytes(other_embed.state_bytes())

    # a checkpoint whose weights were tampered with (wrong tensor shape) fails to load too
    state = torch.load(io.BytesIO(learner.state_bytes()), weights_only=True)
    state["stage1"]["skip.weight"] = torch.zeros(3, 3)
    buf = io.BytesIO()
    torch.save(state, buf)
    with pytest.raises(CheckpointError):
        learner.load_bytes(buf.getvalue())

    for a, b in zip(before, _params(learner)):
        assert torch.equal(a, b)
    assert learner.counters["stage1"].labelled == counters


def test_calibrator_temperature():
    rng = np.random.default_rng(0)
    over, under = Calibrator(500), Calibrator(500)
    for _ in range(300):
        y = int(rng.integers(3))
        wrong = rng.random() < 0.4
        pred = (y + 1) % 3 if wrong else y
        over.add(np.eye(3)[pred] * 20.0, y)  # very confident, right 60% of the time
        under.add(np.eye(3)[y] * 0.2, y)  # always right, barely confident
    assert over.fit() > 2.0
    assert under.fit() < 0.5
    assert over.probs(np.array([20.0, 0.0, 0.0])).max() < 0.9



def _gated_rows(rng, n: int, wrong: int):
    """Rows of a student that is right except for ``wrong`` very confident errors (a new
    teacher the student nearly matches), confidences spread over margins 1 to 8."""
    rows = []
    for i in range(n):
        y = int(rng.integers(3))
        if i % (n // wrong) == 0:
            rows.append((np.eye(3)[(y + 1) % 3] * 12.0, y))
        else:
            rows.append((np.eye(3)[y] * float(rng.uniform(1.0, 8.0)), y))
    return rows


def test_gate_fit_lowers_the_temperature_while_what_passes_stays_right():
    """A few confident errors push the NLL temperature up until the gate passes almost
    nothing; fitted for the gate, it comes down as far as the decisions passing at 0.9
    still agree at 0.9 (lower bound), and never above the NLL fit."""
    from langchain_membrain.students.calibration import agrees_at

    rng = np.random.default_rng(1)
    rows = _gated_rows(rng, 128, 2)
    nll, gated = Calibrator(128), Calibrator(128, gate=0.9)
    for logits, y in rows:
        nll.add(logits, y)
        gated.add(logits, y)
    t_nll, t_gate = nll.fit(), gated.fit()
    assert t_gate < t_nll

    def passing(cal):
        return np.array([int(np.argmax(z)) == y for z, y in rows if cal.probs(z).max() >= 0.9])

    assert len(passing(nll)) < len(passing(gated)) == len(rows)
    assert agrees_at(passing(gated), 0.9)

    poor = Calibrator(128, gate=0.9)  # right 70% of the time: nothing to let through
    base = Calibrator(128)
    for logits, y in _gated_rows(rng, 128, 40):
        poor.add(logits, y)
        base.add(logits, y)
    assert poor.fit() == base.fit()

    shut = Calibrator(128, gate=1.0)  # a gate nothing passes (Policy(confidence=1.0)): the NLL fit
    for logits, y in rows:
        shut.add(logits, y)
    assert shut.fit() == t_nll


def _run(learner: Learner, n: int = 40, seed: int = 3):
    tree = MembrainTree("s", dim=DIM)
    results = [insert_fact(tree, learner, nf) for nf in synthetic_facts(n, seed=seed)]
    return tree, results


def test_policy_teacher_forcing_executes_and_asks_every_decision():
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="teacher", query="always"))
    _, results = _run(learner)
    # one joint question per insert with a decision to take; its path labels every level
    asked = [r for r in results if r.record.steps or r.record.stage2 is not None]
    assert asked and all(r.teacher_calls == 1 and r.record.plan is not None for r in asked)
    assert all(r.stage1_by == "teacher" for r in results if r.record.steps)
    assert learner.ledger.questions["placement"] == len(asked)
    assert learner.counters["stage1"].labelled == t.stage1_calls > 0
    assert all(lab.calibrate for r in results for lab in r.record.labels1)


def test_policy_model_never_asks_nothing():
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="model", query="never"))
    tree, results = _run(learner)
    assert t.stage1_calls == t.stage2_calls == 0
    assert all(r.teacher_calls == 0 for r in results)
    assert all(s.by == "model" for r in results for s in r.record.steps)
    assert len(tree.facts()) == 40
    assert learner.counters["stage1"].steps == 0  # no labels, no training


def test_policy_model_always_audits_every_decision_later():
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="model", query="always"))
    tree = MembrainTree("s", dim=DIM)
    facts = synthetic_facts(30, seed=4)
    for nf in facts:
        rec = place_fact(tree, learner, nf)
        calls_after_place = t.stage1_calls
        assert rec.teacher_calls == 0  # nothing asked on the insert's path
        sup = learner.supervise(rec)
        # every insert is audited later, on the tree as the model saw it
        if not rec.steps and rec.stage2 is None:
            assert sup.teacher_calls == 0  # nothing was decided: nothing to audit
            continue
        assert sup.teacher_calls == 1 and rec.plan is not None
        assert t.stage1_calls - calls_after_place == len(rec.labels1)
        assert all(lab.calibrate for lab in rec.labels1)
        learner.apply_corrections(tree, sup)
    assert learner.counters["stage1"].labelled == t.stage1_calls > 0
    tree.check_invariants()


def test_policy_auto_and_uncertain():
    # past warm-up and always confident enough: the model decides; no audits at rate 0
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="auto", query="uncertain", confidence=0.0, warmup=0, audit_rate=0.0))
    _, results = _run(learner)
    assert t.stage1_calls == 0 and all(s.by == "model" for r in results for s in r.record.steps)
    assert all(r.teacher_calls == 0 for r in results)
    # never confident enough: the teacher is asked now, once per insert, and its answer executed
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="auto", query="uncertain", confidence=1.01, warmup=0,
                                                audit_rate=0.0))
    _, results = _run(learner)
    decided = [r for r in results if r.record.steps]
    assert decided and all(r.stage1_by == "teacher" and r.teacher_calls == 1 for r in decided)
    labels = [lab for r in results for lab in r.record.labels1]
    assert labels and not any(lab.calibrate for lab in labels)  # biased sample: not calibrated on
    assert t.stage1_calls == len(labels)
    # during warm-up the teacher decides even when the model is sure
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="auto", query="uncertain", confidence=0.0, warmup=10**9))
    _, results = _run(learner)
    assert all(r.stage1_by == "teacher" for r in results if r.record.steps)
    assert all(lab.calibrate for r in results for lab in r.record.labels1)
    # audit rate 1: every insert the model decided is audited later (and calibrated on)
    t = CountingTeacher()
    learner = Learner(t, small_config(execute="model", query="uncertain", confidence=0.0, warmup=0, audit_rate=1.0))
    _, results = _run(learner)
    assert all(s.by == "model" for r in results for s in r.record.steps)
    decided = [r for r in results if r.record.steps or r.record.stage2 is not None]
    assert decided and all(not r.record.asked and r.supervision.teacher_calls == 1 for r in decided)
    assert all(lab.calibrate for r in results for lab in r.record.labels1)


def test_gradient_accumulation_steps_once_per_batch():
    cfg = small_config()
    cfg = replace(cfg, training=replace(cfg.training, stage1=StageTraining(batch_size=5, steps_per_batch=1)))
    trainer = OnlineTrainer(cfg.model, cfg.training)
    tree = MembrainTree("s", dim=DIM)
    teacher = HeuristicTeacher()
    for nf in synthetic_facts(30, seed=5):
        insert_by_teacher(tree, nf, teacher)
    nf = synthetic_facts(1, seed=6)[0]
    feats = stage1_features(tree, nf, Subtree(tree, tree.root_id, [tree.root_id, *tree.child_aspects(tree.root_id)]))
    assert feats.n_candidates > 1
    for i in range(4):
        trainer.observe_stage1(feats, 0, trainer.predict_stage1(feats), calibrate=True)
        assert trainer.train_ready() == 0
    assert trainer.counters["stage1"].steps == 0
    trainer.observe_stage1(feats, 0, trainer.predict_stage1(feats), calibrate=True)
    assert trainer.train_ready() == 1
    assert trainer.counters["stage1"].steps == 1 and len(trainer.replay1) == 5 and trainer.pending1 == []


def test_policy_rejects_unknown_modes():
    with pytest.raises(ValueError):
        Policy(execute="sometimes")
    with pytest.raises(ValueError):
        Policy(query="maybe")


def test_traced_inference_follows_the_trained_network(trained):
    """The traced networks used for inference compute what the trained networks compute,
    for every shape: a trace made on a closure without sibling aspects still serves closures
    with aspects, one fact, or many (shapes are traced symbolically)."""
    from langchain_membrain.students.features import stage2_features
    from langchain_membrain.students.models import collate_stage1, collate_stage2

    learner, decisions, _, tree = trained
    tr = learner.trainer
    with torch.no_grad():
        for f, _ in decisions[:10]:
            b = collate_stage1([f])
            torch.testing.assert_close(tr._inference("stage1", b), tr.stage1(b))
        assert "stage1" in tr._traced
        feats = [stage2_features(tree, tree.closure(f)) for f in tree.facts()]
        shapes = {(len(f.fact_tok) > 1, len(f.aspect_tok) > 0) for f in feats}
        assert {(False, True), (True, False), (True, True)} <= shapes  # one fact beside aspects; no aspects; both
        feats.sort(key=lambda f: (len(f.aspect_tok) > 0, len(f.fact_tok)))  # trace on the smallest
        tr._traced.pop("stage2", None)
        for f in feats:
            b = collate_stage2([f])
            for fast, eager in zip(tr._inference("stage2", b), tr.stage2(b)):
                torch.testing.assert_close(fast, eager)
        assert "stage2" in tr._traced


def test_platt_calibration_stays_finite_and_increasing():
    """A window where every decision agreed (the prior's DAgger passes come close) must not
    send the fit to infinity: the stage-2 gate would then pass every decision."""
    from langchain_membrain.students.calibration import PlattCalibrator

    rng = np.random.default_rng(0)
    all_right = PlattCalibrator(256)
    for _ in range(200):
        all_right.add(float(-rng.exponential(2.0)), float(rng.integers(1, 30)), True)
    a, c, b = all_right.fit()
    assert 0.0 <= a <= PlattCalibrator.BOUND and -PlattCalibrator.BOUND <= c <= 0.0 and abs(b) <= PlattCalibrator.BOUND
    assert all_right.prob(-20.0, 10) < 0.999  # never certain, however many agreed

    mixed = PlattCalibrator(256)
    for _ in range(256):
        score, n = float(-rng.exponential(3.0)), float(rng.integers(1, 30))
        mixed.add(score, n, rng.random() < np.exp(score / 2) * (1 - n / 40))  # likelier right when more probable, smaller
    a, c, b = mixed.fit()
    assert a > 0 and c < 0 and mixed.prob(-0.1, 2) > 0.6 > 0.3 > mixed.prob(-12.0, 2)
    assert mixed.prob(-1.0, 2) > mixed.prob(-1.0, 25)  # a larger decision, at the same score, is doubted more


def test_stage2_confidence_follows_the_decision_fit_alone(trained):
    """Stage 2's confidence is the Platt fit of the network's own log-probabilities: audited
    facts arriving in a burst must not rescale the score that fit was made on (a per-fact
    temperature did, and the gate then doubted every closure)."""
    learner, _, _, tree = trained
    tr = learner.trainer
    fact = tree.facts()[0]
    feats = stage2_feats(learner.config, tree, fact)
    types, _, _ = tr.predict_stage2(feats)
    mask = feats.type_mask()
    z = np.where(mask, types, -np.inf)
    z = z - z.max(axis=1, keepdims=True)
    expected = float(max((-np.log(np.exp(z).sum(axis=1))).sum(), -30.0))
    assert tr.stage2_score(types, mask) == pytest.approx(expected)
    n = int((mask.sum(axis=1) > 1).sum())
    tr.decision_calib.w = (2.0, -0.1, 1.0)
    assert tr.confidence_stage2(types, mask) == pytest.approx(1 / (1 + np.exp(-(2.0 * expected - 0.1 * n + 1.0))))


def test_a_checkpoint_fitted_on_another_decision_score_keeps_its_networks_not_its_fit(trained):
    """Checkpoints written before the score changed carry a Platt fit made on temperature-
    scaled scores: the networks load, the fit is left out (the calibrator refits)."""
    learner, decisions, _, _ = trained
    state = learner.trainer.state_dict()
    state["platt"] = [0.01, 40.0]  # a fit on the old score that would pass every decision
    state["platt_rows"] = [[-1.0, 1]]
    del state["decision_score"]
    buf = io.BytesIO()
    torch.save(state, buf)
    fresh = Learner(HeuristicTeacher(), small_config())
    before = fresh.trainer.decision_calib.w
    fresh.load_bytes(buf.getvalue())
    assert fresh.trainer.decision_calib.w == before
    f, _ = decisions[0]
    np.testing.assert_allclose(fresh.trainer.predict_stage1(f), learner.trainer.predict_stage1(f),
                               rtol=1e-5, atol=1e-5)  # in numpy until it trains (nets.py)
    # and one written now keeps its fit and the window it continues from
    learner.trainer.decision_calib.w = (0.7, -0.05, 2.5)
    fresh.load_bytes(learner.state_bytes())
    assert fresh.trainer.decision_calib.w == (0.7, -0.05, 2.5)
    assert list(fresh.trainer.decision_calib.rows) == list(learner.trainer.decision_calib.rows)
    assert len(fresh.trainer.decision_calib.rows) > 0
