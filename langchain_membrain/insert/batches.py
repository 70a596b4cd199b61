"""Batch questions: the inserts a student was unsure of wait, placed where the student put
them, until ``LearnerConfig.batch`` of them have gathered in a namespace; then one question
about all of them (the teacher's ``place_batch``) places and tidies them
(:meth:`~.learner.Learner.settle_batch`).

Definitions:

- the **waiting inserts** of a namespace are its inserts placed by the student while unsure
  (``Answer.batched``), oldest first;
- the **batch view** is a copy of the tree without the waiting facts: the tree the question
  is about. A waiting fact deleted or rewritten since its insert is left out of the
  question; of a key written twice, only the latest insert is asked about.

A batch is settled in three steps: :func:`batch_view`, :func:`answer_batch` (the question,
on the view) and :func:`carry_out` (the answer, on the live tree).
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Protocol, Sequence, cast

from ..errors import InvalidOperationError, MembrainError
from ..students.training import OnlineTrainer
from ..students.training_config import Policy
from ..teachers.base import BatchTeacher, Teacher
from ..teachers.budget import requests_sent
from ..tree.actions import Action, apply_actions
from ..tree.placement import Placement, attach
from ..tree.tree import MembrainTree
from .asking import Asking, sent_since
from .config import LearnerConfig
from .decisions import model_stage2, plan_labels
from .records import PlaceRecord, Stage1Label, Stage2Decision


class Learning(Protocol):
    """What a batch question uses of its :class:`~.learner.Learner`."""

    teacher: Teacher
    config: LearnerConfig
    trainer: OnlineTrainer
    asking: Asking

    def unbiased(self, rec: PlaceRecord, policy: Policy, stage: str) -> bool: ...

    def observe(self, labels1: Sequence[Stage1Label], dec: Stage2Decision | None) -> None: ...


class WaitingInserts:
    """The waiting inserts, per key (a namespace); thread-safe."""

    def __init__(self) -> None:
        self._by_key: dict[Any, list[PlaceRecord]] = {}
        self._lock = threading.Lock()

    def add(self, key: Any, rec: PlaceRecord, size: int) -> bool:
        """Queue ``rec`` under ``key``; whether ``size`` inserts now wait there."""
        with self._lock:
            batch = self._by_key.setdefault(key, [])
            batch.append(rec)
            return len(batch) >= size

    def take(self, key: Any) -> list[PlaceRecord]:
        """The inserts waiting under ``key``, removed from the queue."""
        with self._lock:
            return self._by_key.pop(key, [])

    def counts(self) -> dict[Any, int]:
        """Waiting inserts per key."""
        with self._lock:
            return {k: len(v) for k, v in self._by_key.items() if v}


def batch_view(tree: MembrainTree, records: list[PlaceRecord]) -> tuple[MembrainTree, list[PlaceRecord]]:
    """The batch view of ``tree`` and the records still waiting (see the module docstring)."""
    live: list[PlaceRecord] = []
    seen: set[str] = set()
    for r in reversed(records):
        if r.fact_id in tree and r.fact_id not in seen and tree.node(r.fact_id).text == r.new_fact.text:
            live.append(r)
            seen.add(r.fact_id)
    live.reverse()
    view = tree.copy()
    for r in live:
        view.remove(r.fact_id)
    return view, live


def answer_batch(learner: Learning, view: MembrainTree, live: list[PlaceRecord],
                 carrier: PlaceRecord | None = None) -> list[Placement] | None:
    """The teacher's placements of ``live`` on ``view`` (which this changes), checked one
    after another (each parent a container, each action applicable once the earlier ones
    are applied), and each fact's labels, read as from a joint answer (stage 1 along its
    path, stage 2 on its closure), queued for ``learner``'s training. None, a counted
    failure, when the answer is unusable: the facts then stay where the student put them.
    Reads no live tree, so a slow teacher is asked holding no lock. ``carrier``: the insert
    whose question this is (its ``teacher_calls`` count the requests)."""
    teacher = learner.teacher  # read once (see Asking.ask)
    config, trainer = learner.config, learner.trainer
    before = requests_sent(teacher)
    learned: list[tuple[tuple[Stage1Label, ...], Stage2Decision | None]] = []
    try:
        plans = list(cast(BatchTeacher, teacher).place_batch([(r.fact_id, r.new_fact) for r in live], view))
        if len(plans) != len(live):
            raise InvalidOperationError(f"{len(plans)} placements for {len(live)} facts")
        for r, plan in zip(live, plans):
            if plan.fell_back or plan.parent_id not in view or view.node(plan.parent_id).kind == "fact":
                raise InvalidOperationError(f"the parent of {r.fact_id!r} is not a container")
            plan.path = view.path(plan.parent_id)
            batched = r.answer.batched
            calibrate1 = batched == "stage2" or learner.unbiased(r, config.stage1, "stage1")
            labels1 = plan_labels(config, view, r.new_fact, plan, calibrate1)
            attach(view, r.new_fact, plan.parent_id, node_id=r.fact_id)
            actions = plan.bind(r.fact_id)
            decided = model_stage2(trainer, config, view, r.fact_id)
            dec = None
            if decided is not None:
                calibrate2 = learner.unbiased(r, config.stage2, "stage2")
                dec = Stage2Decision(*decided, actions, "teacher", actions, calibrate2,
                                     gate_sample=calibrate2 or batched == "stage1")
            _, skipped = apply_actions(view, actions, name_aspect=lambda texts: "group")
            if skipped:
                raise InvalidOperationError(f"an action does not apply: {skipped[0][1]}")
            learned.append((labels1, dec))
    except Exception:  # an untrusted teacher: any exception is a failed answer
        learner.asking.count("placement", carrier, failed=True, sent=sent_since(teacher, before))
        return None
    learner.asking.count("placement", carrier, sent=sent_since(teacher, before))
    for labels1, dec in learned:
        learner.observe(labels1, dec)
    return plans


def carry_out(tree: MembrainTree, live: list[PlaceRecord], plans: list[Placement],
              rewrite: Callable[[MembrainTree, list[Action]], Any]) -> int:
    """Move each fact of an answered batch under its parent in ``tree`` and apply its
    actions with ``rewrite`` (which re-validates them: the tree may have changed since the
    question); returns the facts placed."""
    placed = 0
    for r, plan in zip(live, plans):
        try:
            if tree.parent(r.fact_id) != plan.parent_id and plan.parent_id in tree:
                tree.move(r.fact_id, plan.parent_id)
        except MembrainError:
            continue
        rewrite(tree, plan.bind(r.fact_id))
        placed += 1
    return placed


__all__ = ["WaitingInserts", "answer_batch", "batch_view", "carry_out"]
