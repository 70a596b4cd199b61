"""What an insert's steps decide and carry: the records a :class:`~.learner.Learner`
fills as an insert runs (graph.py's nodes), and what its supervision returns.

A :class:`PlaceRecord` travels through every step of one insert, in the insert graph's
state; its :class:`Stage1Decision` per descent level and :class:`Stage2Decision` hold the
features, the model's logits and who decided, so that the supervision can score and train
on them. What the steps decide about the insert as a whole are immutable values, each
replaced whole by the step that decides it: the :class:`Audit` (drawn at begin), the
:class:`Descent` (stage 1), the :class:`Answer` (the joint question), the :class:`Clock`
and the :class:`Tally` of the questions it cost.
"""

from __future__ import annotations

from dataclasses import dataclass
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


@dataclass(frozen=True)
class Audit:
    """Whether an insert is audited, decided when it begins, and what its audit needs.

    ``drawn``: this insert is an audit; when the model decided it alone, the teacher is
    asked later on ``snapshot``, a copy of the tree before the attach. ``shared``: the
    teacher was already asked about this item (its memory operation, in one request that
    also answers the placement), so that audit is not counted again; ``offered``: that
    answer, until a placement question takes it. ``done``: supervised (the audit asked, or
    nothing left to ask)."""

    drawn: bool = False
    shared: bool = False
    offered: Placement | None = None
    snapshot: MembrainTree | None = None
    done: bool = False


@dataclass(frozen=True)
class Descent:
    """Where stage 1's descent stands: ``cursor``, the node it stands on; ``done``, it
    ended (the fact attaches at ``cursor``); ``placed_by``, who chose the fact's parent:
    "teacher", "model", "offline rule" (the ``stand_in``, when the teacher gave no answer
    and the model is not warm yet) or "forced" (nothing to choose). ``shadow_parent``: the
    evaluation teacher's parent for the same fact (metrics only)."""

    cursor: str
    done: bool = False
    placed_by: str = "forced"
    shadow_parent: str | None = None


@dataclass(frozen=True)
class Answer:
    """The insert's joint question and what came of it.

    ``asked``: the question was asked during the insert (``plan`` holds a valid answer,
    unless ``deferred``). ``deferred``: the teacher gave no answer during the insert
    ("stage1" or "stage2", the stage that asked; it failed, was not asked while its circuit
    breaker was open, or ran past the insert's budget): the insert was decided without it,
    and the question is asked again on the audit's snapshot by
    :meth:`~.learner.Learner.supervise`, like an audit. ``batched``: the unsure stage,
    while the insert is placed by the student to wait for its batch question.
    ``move_to``: the teacher's parent, when it differs from the model's. ``labels1``: the
    stage-1 labels read from ``plan``."""

    asked: bool = False
    plan: Placement | None = None
    labels1: tuple[Stage1Label, ...] = ()
    deferred: str | None = None
    batched: str | None = None
    move_to: str | None = None


@dataclass(frozen=True)
class Clock:
    """An insert's time: its start (wall clock and CPU time of this process) and the
    shadow teacher's seconds, left out of ``place_ms`` and ``place_cpu_ms`` (from begin to
    apply_stage2)."""

    wall0: float = 0.0
    cpu0: float = 0.0
    shadow_s: float = 0.0
    place_ms: float = 0.0
    place_cpu_ms: float = 0.0


@dataclass(frozen=True)
class Tally:
    """The teacher questions an insert cost: requests counted (``calls``) and failures."""

    calls: int = 0
    failures: int = 0

    def add(self, calls: int, failed: bool) -> Tally:
        return Tally(self.calls + calls, self.failures + failed)


@dataclass
class PlaceRecord:
    """What an insert's steps decided, for :meth:`~.learner.Learner.supervise` and the caller.

    Each step returns its decision as an immutable value (:class:`Audit`, :class:`Descent`,
    :class:`Answer`, :class:`Clock`, :class:`Tally`) that replaces the record's; the
    properties read what callers read of them.
    """

    fact_id: str
    new_fact: NewFact
    placed_under: str
    steps: list[Stage1Decision]
    stage2: Stage2Decision | None
    applied: list[Action]
    audit: Audit = Audit()
    descent: Descent = Descent("")
    answer: Answer = Answer()
    clock: Clock = Clock()
    tally: Tally = Tally()

    def charge(self, calls: int, failed: bool) -> None:
        """Count a question asked for this insert."""
        self.tally = self.tally.add(calls, failed)

    @property
    def teacher_calls(self) -> int:
        return self.tally.calls

    @property
    def teacher_failures(self) -> int:
        return self.tally.failures

    @property
    def place_ms(self) -> float:
        return self.clock.place_ms

    @property
    def place_cpu_ms(self) -> float:
        return self.clock.place_cpu_ms

    @property
    def placed_by(self) -> str:
        return self.descent.placed_by

    @property
    def shadow_parent(self) -> str | None:
        return self.descent.shadow_parent

    @property
    def asked(self) -> bool:
        return self.answer.asked

    @property
    def plan(self) -> Placement | None:
        return self.answer.plan

    @property
    def labels1(self) -> tuple[Stage1Label, ...]:
        return self.answer.labels1

    @property
    def deferred(self) -> str | None:
        return self.answer.deferred


@dataclass
class SupervisionResult:
    """What :meth:`~.learner.Learner.supervise` did: teacher calls, optimiser steps, and corrections
    (a re-placement and/or the teacher's stage-2 actions) for the caller to apply."""

    corrections: list[Correction]
    actions: list[Action]
    teacher_calls: int
    teacher_failures: int
    steps: int
    train_ms: float

    def charge(self, calls: int, failed: bool) -> None:
        """Count a question asked by this supervision."""
        self.teacher_calls += calls
        self.teacher_failures += failed


__all__ = ["Answer", "Audit", "By", "Clock", "Correction", "Descent", "PlaceRecord", "Stage1Decision", "Stage1Label",
           "Stage2Decision", "SupervisionResult", "Tally"]
