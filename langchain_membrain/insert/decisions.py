"""The student's decisions in an insert, as pure functions of its trainer, the learner's
config and the tree (nothing here writes the tree or keeps state).

- :func:`warm`, :func:`unsure`: whether a stage has seen enough labels, and whether a
  decision sends the insert to the teacher;
- :func:`stage1_feats`, :func:`stage2_feats`: the networks' inputs;
- :func:`second_opinion`, :func:`attach_here`: the linear students' corrections of a
  stage-1 level;
- :func:`model_stage2`, :func:`model_descend_from`: what the model alone would do;
- :func:`plan_labels`: stage-1 labels read from a teacher's placement;
- :func:`check_fact`: a new fact's embedding fits the model and the tree.
"""

from __future__ import annotations

import numpy as np

from ..errors import DimensionError
from ..students.decoding import decode
from ..students.features import S1, Stage1Features, Stage2Features, stage1_features, stage2_features
from ..students.training import OnlineTrainer
from ..students.training_config import Policy
from ..tree.actions import Action
from ..tree.placement import NewFact, Placement, Subtree, descend, destination, path_choices
from ..tree.tree import MembrainTree
from .config import LearnerConfig
from .records import Stage1Label


def warm(trainer: OnlineTrainer, policy: Policy, stage: str) -> bool:
    """Whether ``stage`` has seen ``policy.warmup`` labels."""
    return trainer.labelled_count(stage) >= policy.warmup


def unsure(trainer: OnlineTrainer, policy: Policy, stage: str, confidence: float) -> bool:
    """Whether this decision sends the insert to the teacher now: always under
    execute="teacher"; under "auto", before warm-up or below ``policy.confidence``
    (unless query="never"); never under "model"."""
    if policy.execute == "teacher":
        return True
    if policy.execute == "model" or policy.query == "never":
        return False
    return not warm(trainer, policy, stage) or confidence < policy.confidence


def stage1_feats(config: LearnerConfig, tree: MembrainTree, new_fact: NewFact, sub: Subtree) -> Stage1Features:
    return stage1_features(tree, new_fact, sub, max_facts=config.model.max_context_facts)


def stage2_feats(config: LearnerConfig, tree: MembrainTree, fact_id: str) -> Stage2Features:
    return stage2_features(tree, tree.closure(fact_id), max_facts=config.model.max_closure_facts)


def plan_labels(config: LearnerConfig, tree: MembrainTree, new_fact: NewFact, plan: Placement,
                calibrate: bool) -> tuple[Stage1Label, ...]:
    """Stage-1 labels of every level on the teacher's path, on ``tree`` (without the fact)."""
    return tuple(Stage1Label(stage1_feats(config, tree, new_fact, sub), i, calibrate)
                 for sub, i in path_choices(tree, new_fact, plan.path, top_k=config.model.top_k))


def model_stage2(trainer: OnlineTrainer, config: LearnerConfig, tree: MembrainTree,
                 fact_id: str) -> tuple[Stage2Features, np.ndarray, list[Action], float] | None:
    """The model's stage-2 decision on the fact's closure: (features, type logits,
    decoded actions, calibrated confidence); None when only Idle is possible."""
    feats = stage2_feats(config, tree, fact_id)
    mask = feats.type_mask()
    if not mask[:, 1:].any():
        return None
    t_logits, d_logits, g_logits = trainer.predict_stage2(feats)
    actions = decode(tree, feats, t_logits, d_logits, g_logits, config.decode)
    return feats, t_logits, actions, trainer.confidence_stage2(t_logits, mask)


def model_descend_from(trainer: OnlineTrainer, config: LearnerConfig, tree: MembrainTree, new_fact: NewFact,
                       node_id: str) -> str:
    """Where the model alone would attach ``new_fact``, descending from ``node_id``."""
    def choose(sub: Subtree) -> int:
        return int(np.argmax(trainer.predict_stage1(stage1_feats(config, tree, new_fact, sub))))
    return destination(descend(tree, new_fact, choose, top_k=config.model.top_k, start=node_id))


def check_fact(config: LearnerConfig, tree: MembrainTree, new_fact: NewFact) -> None:
    """Raise :class:`DimensionError` unless the fact's embedding fits the model and the tree."""
    dim = config.model.dim
    emb = np.asarray(new_fact.embedding)
    if emb.ndim != 1 or emb.size != dim:
        raise DimensionError(f"the new fact's embedding has shape {emb.shape}, the model reads {dim}")
    if tree.dim is not None and tree.dim != dim:
        raise DimensionError(f"the tree holds {tree.dim}-d embeddings, the model reads {dim}")


def second_opinion(trainer: OnlineTrainer, config: LearnerConfig, feats: Stage1Features, choice: int,
                   conf: float) -> tuple[int, float]:
    """Where the network is unsure: the linear student's choice and confidence when its
    own calibrated confidence passes the gate (students.LinearStage1), else the
    network's. The linear student is trusted only once its calibration was fitted."""
    linear = trainer.linear1
    if not linear.calib.fitted:
        return choice, conf
    logits = linear.logits(feats)
    lconf = linear.confidence(logits)
    if unsure(trainer, config.stage1, "stage1", lconf):
        return choice, conf
    return int(np.argmax(logits)), lconf


def attach_here(trainer: OnlineTrainer, config: LearnerConfig, feats: Stage1Features, logits: np.ndarray,
                choice: int, conf: float) -> tuple[int, float]:
    """Stop or go down as the fitted attach-here student says (students.AttachHere): here
    where its balanced probability is >= 1/2, else into the networks' choice (their best
    child if they stopped). The confidence is the lower of the choice's and the student's
    probability of its side (a doubtful level goes to the teacher); a stop is the
    teacher's to confirm until the student's stops agreed at the gate."""
    student = trainer.attach
    if not student.ready or not feats.num[:, S1["is_best_aff"]].any():
        return choice, conf
    p_stop = student.prob(feats)
    if student.balanced(feats) >= 0.5:
        gate = config.stage1.confidence
        return 0, p_stop if student.stops_agree_at(gate) else min(p_stop, 0.5 * gate)
    if choice == 0:
        probs = trainer.calib["stage1"].probs(logits)
        choice = 1 + int(np.argmax(probs[1:]))
        conf = float(probs[choice] / max(probs[1:].sum(), 1e-12))
    return choice, min(conf, 1.0 - p_stop)


__all__ = ["attach_here", "check_fact", "model_descend_from", "model_stage2", "plan_labels", "second_opinion",
           "stage1_feats", "stage2_feats", "unsure", "warm"]
