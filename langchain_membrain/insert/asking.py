"""The joint question of an insert, asked of the teacher and counted.

:class:`Asking` holds the teacher's seat (read at each question) and the
:class:`~.ledger.QuestionLedger`; a question is counted in the ledger and charged to the
insert or supervision it was asked for (``charge``). :func:`valid_plan` is what makes a
teacher's placement an answer.
"""

from __future__ import annotations

from typing import Protocol

from ..teachers.base import Teacher, ask_placement
from ..teachers.budget import requests_sent
from ..teachers.seat import SeatedTeacher, TeacherSeat
from ..tree.actions import Group
from ..tree.placement import NewFact, Placement
from ..tree.tree import MembrainTree
from .ledger import QuestionLedger


class Charged(Protocol):
    """What a question is charged to: an insert's record or a supervision's result."""

    def charge(self, calls: int, failed: bool) -> None: ...


def sent_since(teacher: Teacher, before: int | None) -> int | None:
    """The requests ``teacher`` sent since it counted ``before`` (None: it counts none)."""
    return None if before is None or (after := requests_sent(teacher)) is None else after - before


def valid_plan(tree: MembrainTree, plan: Placement) -> Placement | None:
    """``plan`` with its path on ``tree`` when it is a teacher's answer that fits it: its
    parent a container of ``tree`` and its actions on distinct nodes; else None. A
    placement its teacher's own fallback chose (``fell_back``) is no answer."""
    if plan.fell_back:
        return None  # the teacher gave no usable answer: its fallback chose
    parent = plan.parent_id
    if parent not in tree or tree.node(parent).kind == "fact":
        return None
    touched: list[str] = []
    for act in plan.actions:
        touched += list(act.node_ids) if isinstance(act, Group) else [act.node_id]
    if len(touched) != len(set(touched)):
        return None  # a node acted on twice
    plan.path = tree.path(parent)
    return plan


class Asking:
    """The teacher's questions of one learner: asked of the seat's teacher, counted in
    ``ledger``."""

    teacher = SeatedTeacher()  # the seat's teacher, read at each question

    def __init__(self, seat: TeacherSeat, ledger: QuestionLedger):
        self.seat = seat
        self.ledger = ledger

    def count(self, kind: str, on: Charged | None, *, failed: bool = False, shared: bool = False,
              sent: int | None = None) -> None:
        """Count one question in the ledger and on what it was asked for (``on``)."""
        counted = self.ledger.count(kind, failed=failed, shared=shared, sent=sent)
        if on is not None and counted is not None:
            on.charge(counted, failed)

    def ask(self, tree: MembrainTree, new_fact: NewFact, kind: str, on: Charged, *, shared: bool = False,
            offered: Placement | None = None) -> Placement | None:
        """The joint question on ``tree`` (which must not hold the new fact): a valid plan
        (:func:`valid_plan`), else None (a counted failure). ``offered``: the answer given
        already (with the memory operation), taken when it is still valid on ``tree``
        without a request; else the question is asked."""
        if offered is not None:
            plan = valid_plan(tree, offered)
            if plan is not None:
                self.count(kind, on, shared=True, sent=0)
                return plan
        teacher = self.teacher  # read once: a question is asked of, and counted for, one teacher
        before = requests_sent(teacher)
        try:
            answer = ask_placement(teacher, new_fact, tree)
        except Exception:  # an untrusted teacher: any exception is a failed answer
            answer = None
        plan = valid_plan(tree, answer) if answer is not None else None
        self.count(kind, on, failed=plan is None, shared=shared, sent=sent_since(teacher, before))
        return plan


__all__ = ["Asking", "Charged", "sent_since", "valid_plan"]
