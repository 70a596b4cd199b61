"""The memory operation's question and answer (README, Memories that change).

- An :class:`Operation` is one decision about a new item: ADD, UPDATE(old), DELETE(old) or
  IGNORE (their meaning: operations.py).
- An :class:`OperationQuestion` is what a teacher is asked: the new item and its
  :class:`Candidate` facts, the current facts of its namespace nearest to it.
- :func:`validate_operation` turns a teacher's answer into a valid Operation for its
  question, or ADD with the reason it was rejected.

This module depends on nothing that decides: the offline rule (operation_rule.py), the
student (operation_student.py) and the decider (operations.py) all speak these types.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

import numpy as np

from .placement import Placement
from .tree import MembrainTree

OpKind = Literal["ADD", "UPDATE", "DELETE", "IGNORE"]
OP_KINDS: tuple[str, ...] = ("ADD", "UPDATE", "DELETE", "IGNORE")


@dataclass(frozen=True)
class Operation:
    """One decision. ``target``: the candidate's key (UPDATE and DELETE only). ``keep``
    (DELETE only): whether the retracting item is itself a memory to store. ``placement``:
    where the item goes, when the teacher answered that with the operation (an LLM's one
    request per insert); the insert follows it instead of asking again. Not compared."""

    kind: OpKind
    target: str | None = None
    keep: bool = False
    placement: Placement | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in OP_KINDS:
            raise ValueError(f"an operation is one of {OP_KINDS}, not {self.kind!r}")


ADD = Operation("ADD")
IGNORE = Operation("IGNORE")


@dataclass(frozen=True)
class Candidate:
    """A current fact of the namespace shown with the question."""

    key: str
    text: str
    similarity: float  # cosine with the new item
    embedding: np.ndarray | None = field(default=None, repr=False, compare=False)
    valid_from: float = 0.0
    value: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@dataclass(frozen=True)
class OperationQuestion:
    """What a teacher is asked: the new item and its candidates (nearest first)."""

    text: str
    embedding: np.ndarray | None
    candidates: tuple[Candidate, ...]
    namespace: tuple[str, ...] = ()
    value: dict[str, Any] = field(default_factory=dict, compare=False)
    #: A copy of the namespace's tree as the candidates were drawn, for teachers that are
    #: not ``fast`` (an LLM in one-call mode answers the operation and the placement of a
    #: stored item in one request); None for in-process teachers.
    tree: MembrainTree | None = field(default=None, repr=False, compare=False)

    def candidate(self, key: str) -> Candidate | None:
        return next((c for c in self.candidates if c.key == key), None)


def validate_operation(answer: Any, question: OperationQuestion) -> tuple[Operation, str | None]:
    """A teacher's answer as a valid Operation for ``question``, and the reason it was
    rejected (None when it was valid). Rejected answers become ADD: an unknown operation, a
    target that is not one of the question's candidates (a fact of another namespace never
    is), a missing target, or anything that is not an :class:`Operation` or its dict form
    ``{"operation": ..., "target": ..., "keep": ...}``."""
    if isinstance(answer, dict):
        try:
            kind = str(answer.get("operation", answer.get("kind", ""))).upper()
            target = answer.get("target")
            answer = Operation(cast(OpKind, kind), None if target in (None, "") else str(target),
                               bool(answer.get("keep", False)))  # __post_init__ rejects an unknown kind
        except (ValueError, TypeError) as exc:
            return ADD, f"malformed operation: {exc}"
    if not isinstance(answer, Operation):
        return ADD, f"an operation answer is an Operation, got {type(answer).__name__}"
    if answer.kind in ("UPDATE", "DELETE"):
        if answer.target is None:
            return ADD, f"{answer.kind} without a target"
        if question.candidate(answer.target) is None:
            return ADD, f"{answer.kind} of {answer.target!r}, which is not a candidate"
        return answer, None
    return Operation(answer.kind, placement=answer.placement), None
