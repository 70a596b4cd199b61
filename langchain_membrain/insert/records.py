"""What an insert's steps decide and carry: the records a :class:`~.pipeline.Learner`
fills as an insert runs (graph.py's nodes), and what its supervision returns.

A :class:`PlaceRecord` travels through every step of one insert; its
:class:`Stage1Decision` per descent level and :class:`Stage2Decision` hold the features,
the model's logits and who decided, so that the supervision can score and train on them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from ..students.features import Stage1Features, Stage2Features
from ..tree.actions import Action
from ..tree.placement import NewFact, Placement
from ..tree.tree import MembrainTree

By = Literal["model", "teacher", "forced", "offline rule"]


@dataclass
class Stage1Decision:
    """One level of the model's descent. Indices are into ``candidates`` (0: attach here).
    ``shadow_choice`` is the evaluation teacher's answer (metrics only)."""

    node_id: str
    candidates: list[str]
    feats: Stage1Features
    logits: np.ndarray
    model_choice: int
    confidence: float
    executed: int
    by: By
    shadow_choice: int | None = None
    trivial_choice: int = 0


@dataclass
class Stage1Label:
    """A stage-1 label read from a teacher's placement: the level's features, the teacher's
    index, and whether it is an unbiased sample (for calibration)."""

    feats: Stage1Features
    target: int
    calibrate: bool


@dataclass
class Stage2Decision:
    """The stage-2 decision on the closure of the new fact (actions are pre-application)."""

    feats: Stage2Features
    type_logits: np.ndarray
    model_actions: list[Action]
    confidence: float
    executed: list[Action]
    by: By
    teacher_actions: list[Action] | None = None
    calibrate: bool = False
    shadow_actions: list[Action] | None = None
    # A row for the linear Idle student's gate (students.LinearIdle): the teacher was not
    # asked *because* stage 2 was unsure (calibrate, or the question was stage 1's).
    gate_sample: bool = False


@dataclass
class Correction:
    """The teacher would have put ``fact_id`` under ``to_parent`` (it is under ``from_parent``)."""

    fact_id: str
    from_parent: str
    to_parent: str
    reason: str = "stage1"


@dataclass
class PlaceRecord:
    """What an insert's steps decided, for :meth:`~.pipeline.Learner.supervise` and the caller.

    ``asked``: the joint question was asked during the insert (``plan`` holds a valid
    answer). ``drawn``: this insert is an audit; when the model decided it alone, the
    teacher is asked later on ``snapshot``, a copy of the tree before the attach.
    ``shared``: the teacher was already asked about this item (its memory operation, in one
    request that also answers the placement), so that audit is not counted again.
    ``deferred``: the teacher gave no answer during the insert ("stage1" or "stage2", the
    stage that asked; it failed, was not asked while its circuit breaker was open, or ran
    past the insert's budget): the insert was decided without it (``placed_by``), and the
    question is asked again on ``snapshot`` by :meth:`~.pipeline.Learner.supervise`, like an audit.
    ``placed_by``: who chose the fact's parent: "teacher", "model", "offline rule" (the
    ``stand_in``, when the teacher gave no answer and the model is not warm yet) or "forced"
    (nothing to choose).
    """

    fact_id: str
    new_fact: NewFact
    placed_under: str
    steps: list[Stage1Decision]
    stage2: Stage2Decision | None
    applied: list[Action]
    teacher_calls: int = 0
    teacher_failures: int = 0
    place_ms: float = 0.0  # wall-clock time from begin to apply_stage2, the shadow teacher excluded
    place_cpu_ms: float = 0.0  # CPU time of this process over the same steps, shadow excluded
    shadow_parent: str | None = None
    supervised: bool = False
    cursor: str = ""  # the node the descent stands on
    descended: bool = False  # the descent ended (attach at ``cursor``)
    drawn: bool = False
    asked: bool = False
    shared: bool = False  # the memory operation's one-call question answered the placement too
    offered: Placement | None = None  # ... and that answer, until a placement question takes it
    deferred: str | None = None  # the stage whose question got no answer: asked again in supervise
    batched: str | None = None  # the unsure stage, while placed by the student to wait for its batch question
    placed_by: str = "forced"
    plan: Placement | None = None
    move_to: str | None = None  # the teacher's parent, when it differs from the model's
    labels1: list[Stage1Label] = field(default_factory=list)
    snapshot: MembrainTree | None = None
    clock: tuple[float, float, float] = (0.0, 0.0, 0.0)  # (wall start, CPU start, shadow seconds)


@dataclass
class SupervisionResult:
    """What :meth:`~.pipeline.Learner.supervise` did: teacher calls, optimiser steps, and corrections
    (a re-placement and/or the teacher's stage-2 actions) for the caller to apply."""

    corrections: list[Correction]
    actions: list[Action]
    teacher_calls: int
    teacher_failures: int
    steps: int
    train_ms: float


__all__ = ["By", "Correction", "PlaceRecord", "Stage1Decision", "Stage1Label", "Stage2Decision", "SupervisionResult"]
