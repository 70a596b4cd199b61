"""Memory operations: for every new item, ADD, UPDATE(old), DELETE(old) or IGNORE.

Definitions (README, Memories that change):

- The **candidates** of a new item are the ``k`` current facts of its namespace nearest to it
  by embedding cosine (its namespace only: an operation never reaches another one).
- **ADD**: the item is a new memory; it is placed in the tree as always.
- **UPDATE(old)**: the item supersedes the candidate ``old``; ``old``'s version is archived as
  history (text, times, ``valid_from``, ``valid_to`` and ``superseded_by``: the key that holds
  the new version) and the new text takes its place: same key, same parent in the tree.
- **DELETE(old)**: the item retracts ``old``; ``old`` is archived as history and leaves the
  tree. The item itself is stored as a memory when the answer says it is one (``keep``),
  else it is kept in the namespace's log.
- **IGNORE**: the item is not a memory: it states nothing (greetings, thanks, small talk, a
  question alone; :func:`states_something`); it is kept in the namespace's log
  (:meth:`~.tree.MembrainTree.log_ignored`), not in the tree.

Who decides: the memory's :class:`OperationDecider`. A student (:class:`OperationStudent`, a
small network over the item and each candidate) decides alone when its calibrated
confidence passes the gate; otherwise (and on a decaying audit schedule) the teacher is asked
with ``choose_operation(question) -> Operation``. A teacher without that method answers with
:func:`conservative_operation`, the offline rule. Every answer is validated by
:func:`validate_operation`: an unknown operation, an unknown candidate (which includes a fact
of another namespace) or a malformed answer becomes ADD, so nothing is ever lost.

Only ``add``/``add_many`` without a key run an operation; ``put(key, ...)`` keeps its
LangGraph meaning and always stores.

The modules of the operation: ``tree/operation_types.py`` (the question and answer types and
:func:`validate_operation`), ``teachers/operation_rule.py`` (the offline rule and its text
heuristics), ``students/operation.py`` (the student), and this one (asking the teacher, the
decider, :func:`decide` and :func:`apply`, which the writer calls in turn, placing the item
between them where the operation keeps it).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Sequence, cast

import numpy as np

from ..teachers.base import OperationTeacher, RemoteTeacher, capable, is_fast
from ..teachers.budget import requests_sent
from ..teachers.operation_rule import (
    conservative_operation,
)
from ..teachers.seat import SeatedTeacher, TeacherSeat
from ..tree.operation_types import (
    ADD,
    OP_KINDS,
    Candidate,
    Operation,
    OperationQuestion,
    validate_operation,
)
from ..tree.tree import MembrainTree

if TYPE_CHECKING:  # pragma: no cover
    from ..storage.forest import Forest

__all__ = [
    "OperationCounters", "OperationDecider", "OperationDecision", "apply", "ask_teacher", "candidates_for", "decide",
]


# ------------------------------------------------------------------ asking the teacher
def ask_teacher(teacher: Any, question: OperationQuestion) -> tuple[Operation, str | None]:
    """The teacher's validated answer (see :func:`validate_operation`); a teacher without
    ``choose_operation`` answers with :func:`conservative_operation`; one that raises gives
    ADD with the error as the reason. A guarded LLM teacher is asked through
    ``try_operation``, which raises where ``choose_operation`` would answer with its
    fallback's rule: such an answer is not the teacher's."""
    if capable(teacher, RemoteTeacher):
        choose = teacher.try_operation
    elif capable(teacher, OperationTeacher):
        choose = teacher.choose_operation
    else:
        return conservative_operation(question), None
    try:
        answer = choose(question)
    except Exception as exc:  # noqa: BLE001 - an answer is untrusted: any failure is ADD
        return ADD, f"{type(exc).__name__}: {exc}"
    return validate_operation(answer, question)


# ------------------------------------------------------------------ candidates
def candidates_for(tree: MembrainTree, nearest: Sequence[tuple[str, float]]) -> tuple[Candidate, ...]:
    """The question's candidates from ``(key, cosine)`` pairs (nearest first), keeping the
    current facts of ``tree`` only."""
    out = []
    for key, sim in nearest:
        if key in tree and tree.node(key).kind == "fact":
            node = tree.node(key)
            out.append(Candidate(key, node.text, float(sim), node.embedding, tree.valid_from(key),
                                 dict(node.metadata.get("value") or {})))
    return tuple(out)


# ------------------------------------------------------------------ deciding and applying
def decide(forest: Forest, decider: OperationDecider, ns: tuple[str, ...], value: dict[str, Any],
           text: str, vec: np.ndarray, *, audit: bool | None = None) -> OperationDecision:
    """The operation for one item added without a key, judged against the namespace's
    nearest current facts. ``audit``: the caller's audit draw for this item (see
    :meth:`OperationDecider.judge`)."""
    with forest.lock(ns):
        tree = forest.tree(ns, create=False)
        index = forest.index(ns)
        nearest = index.nearest(vec, k=decider.k) if tree is not None and index is not None else []
        # the index of a namespace is keyed by its tree's fact ids
        cands = candidates_for(tree, cast("list[tuple[str, float]]", nearest)) if tree is not None else ()
        snapshot = None
        if not is_fast(decider.teacher):  # O(n), beside an LLM's latency
            snapshot = tree.copy() if tree is not None else MembrainTree("/".join(ns))
    return decider.judge(OperationQuestion(text, vec, cands, ns, value, snapshot), audit=audit)


def apply(forest: Forest, ns: tuple[str, ...], op: Operation, value: dict[str, Any], text: str,
          vec: np.ndarray, placed: str | None = None) -> str | None:
    """Carry out ``op`` for one item (one committed write); returns the key the item now
    has, or None when it is still to be placed (an ADD, or an UPDATE whose fact another
    process removed meanwhile). ``placed``: the item's key where a DELETE keeps the item
    (placed by the caller before the old fact is retired). An UPDATE archives the old version and writes the new one in the same write."""
    meta = {"value": value, "indexed": True}
    target = op.target
    if op.kind == "ADD":
        return None
    if op.kind == "IGNORE":
        return forest.mutate(ns, lambda t: t.log_ignored(None, text, embedding=vec, metadata=meta))
    if op.kind == "UPDATE":
        def update(t: MembrainTree) -> str | None:
            if target is None or target not in t or t.node(target).kind != "fact":
                return None
            t.supersede(target, text, embedding=vec, metadata=meta)
            return target

        return forest.mutate(ns, update)

    def delete(t: MembrainTree) -> str | None:
        logged = None
        if not op.keep:
            logged = t.log_ignored(None, text, embedding=vec, metadata=meta, reason="retraction")
        if target is not None and target in t and t.node(target).kind == "fact":
            t.retire(target, superseded_by=placed or logged)
        return placed or logged

    return forest.mutate(ns, delete)


# ------------------------------------------------------------------ the decider
@dataclass
class OperationCounters:
    """What ``stats()["operations"]`` reports."""

    decisions: int = 0
    asked: int = 0  # teacher questions about the operation (requests, retries included, with an LLM)
    student_decided: int = 0  # decisions the student took alone (gate open)
    compared: int = 0  # answered questions the student had proposed an answer for
    agreement_hits: int = 0  # student == teacher, over the compared decisions
    teacher_failures: int = 0  # questions without a usable answer (decided without the teacher)
    teacher_skipped: int = 0  # of those, questions not sent (breaker open, budget spent)
    fallback_decided: int = 0  # stored as ADD because the teacher gave no usable answer
    by_kind: dict[str, int] = field(default_factory=lambda: {k: 0 for k in OP_KINDS})
    last_failure: str | None = None
    #: Per decided kind: decisions, by the student alone, by the teacher (asked: warm-up, a
    #: closed gate, an audit, a possible correction), and of the answers compared with the
    #: student's proposal, how many the teacher (or the audit) disagreed with.
    per_kind: dict[str, dict[str, int]] = field(default_factory=lambda: {
        k: {"decisions": 0, "student": 0, "teacher": 0, "compared": 0, "disagreed": 0} for k in OP_KINDS})

    def count(self, kind: str, *, alone: bool, compared: bool, agreed: bool) -> None:
        """One decision of ``kind`` in :attr:`per_kind` (``by_kind`` and ``decisions`` too)."""
        self.decisions += 1
        self.by_kind[kind] += 1
        row = self.per_kind[kind]
        row["decisions"] += 1
        row["student" if alone else "teacher"] += 1
        row["compared"] += compared
        row["disagreed"] += compared and not agreed

    def as_dict(self) -> dict[str, Any]:
        return {"decisions": self.decisions, "teacher_questions": self.asked,
                "student_decided": self.student_decided,
                "student_share": self.student_decided / max(self.decisions, 1),
                "agreement": self.agreement_hits / self.compared if self.compared else None,
                "compared": self.compared, "teacher_failures": self.teacher_failures,
                "teacher_skipped": self.teacher_skipped, "fallback_decided": self.fallback_decided,
                "by_kind": dict(self.by_kind), "per_kind": {k: dict(v) for k, v in self.per_kind.items()},
                "last_failure": self.last_failure}


@dataclass(frozen=True)
class OperationDecision:
    """One item's decided operation: ``by`` "student" (it decided alone), "teacher" (the
    teacher's answer) or "fallback" (the teacher was asked and gave no usable answer, or was
    not asked while it is down or past the insert's budget: the item is stored as a new
    memory, ADD, which loses nothing; when the question was only an audit of a proposal the
    student could take alone, the student's answer stands, ``by`` "student"); ``candidates``: the keys of the candidates shown,
    nearest first; ``asked``: whether the teacher was asked; ``requests``: the requests sent
    for it (None: not asked, or an in-process teacher); ``answered``: whether the teacher
    gave the answer."""

    operation: Operation
    by: Literal["student", "teacher", "fallback"]
    candidates: tuple[str, ...] = ()
    asked: bool = False
    requests: int | None = None
    answered: bool = False


class OperationDecider:
    """Decides each item's operation: the student when its gate is open, else the teacher.

    Without a student (``student=None``) every decision is the teacher's. With the offline
    heuristic teacher the decisions cost nothing, so the default memory asks it every time
    and the student (if any) only learns; see :class:`OperationStudent` for the gate.
    ``teacher``: a teacher, or the :class:`~.teachers.seat.TeacherSeat` that holds it (a
    memory's, shared with its learner), read at each question.
    """

    teacher = SeatedTeacher()  # the seat's teacher, read at each question

    def __init__(self, teacher: Any, *, k: int = 5, student: Any = None):
        self.seat = TeacherSeat.of(teacher)
        self.k = int(k)
        self.student = student
        self.counters = OperationCounters()
        self.last: OperationDecision | None = None  # the latest decision (a new object each time)
        self._guard = threading.Lock()

    def decide(self, question: OperationQuestion, *, audit: bool | None = None) -> Operation:
        """The item's operation (:meth:`judge`'s)."""
        return self.judge(question, audit=audit).operation

    def judge(self, question: OperationQuestion, *, audit: bool | None = None) -> OperationDecision:
        """The item's decision: its operation, who decided and what it cost. ``audit``:
        whether this item is an audit (the teacher is asked whatever the student's
        confidence), when the caller draws it (the memory draws one per insert for the
        operation and the placement together); None: the student draws its own at its
        ``audit_rate``."""
        c = self.counters
        student_op, trusted, gate = (None, False, False)
        compared = False  # the teacher answered and the student had proposed an answer
        if self.student is not None:
            gate = self.student.gate_open()
            student_op, trusted = self.student.propose(question)
        can_audit = trusted and student_op is not None
        audit = can_audit and (self.student.audit_due() if audit is None else audit)
        alone = can_audit and not audit
        if alone:
            assert student_op is not None  # alone implies can_audit
            op = student_op
            with self._guard:
                c.student_decided += 1
        else:
            teacher = self.teacher  # read once: a question is asked of, and counted for, one teacher
            before = requests_sent(teacher)
            op, failure = ask_teacher(teacher, question)
            after = requests_sent(teacher)
            requests = None if before is None or after is None else after - before
            by: Literal["student", "teacher", "fallback"] = "teacher"
            with self._guard:
                c.asked += 1 if requests is None else requests
                if failure is not None:
                    # No answer of the teacher's: not a label, not compared. The student's
                    # own answer when it could have decided alone (this was its audit), else
                    # ADD (ask_teacher's), which loses nothing.
                    c.teacher_failures += 1
                    c.teacher_skipped += requests == 0
                    c.last_failure = failure
                    if can_audit:
                        assert student_op is not None  # can_audit implies a proposal
                        op, by = student_op, "student"
                    else:
                        by = "fallback"
                        c.fallback_decided += 1
                elif student_op is not None:
                    c.compared += 1
                    c.agreement_hits += int(student_op == op)
                    compared = True
            if self.student is not None and failure is None:
                # Asked *because* the student was unsure (its gate open, its answer below
                # the bar): a label it is not fairly measured on (see learn).
                self.student.learn(question, op, student_op, unbiased=audit or not gate)
        with self._guard:
            c.count(op.kind, alone=alone, compared=compared, agreed=student_op == op)
            decision = OperationDecision(op, "student" if alone else by, tuple(c.key for c in question.candidates),
                                         not alone, None if alone else requests, not alone and failure is None)
            self.last = decision
        return decision

    def stats(self) -> dict[str, Any]:
        out = self.counters.as_dict()
        if self.student is not None:
            out["student"] = self.student.stats()
        return out
