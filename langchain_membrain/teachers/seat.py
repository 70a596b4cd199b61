"""`TeacherSeat`: the one place a memory's teacher is held.

A memory asks its teacher from several objects: the learner (placements, stage 2, audits,
batches, naming), the operation decider (memory operations) and the background half (its
batch questions and stats). Each of them reads the teacher from the memory's one seat, at
each question, so ``memory.reconfigure(teacher=X)`` reaches every question at once: placements and
operations are never asked of different teachers.

A :class:`~.learner.Learner` or an :class:`~.operations.OperationDecider` built with a plain
teacher gets a seat of its own.

This module imports nothing heavy.
"""

from __future__ import annotations

from typing import Any


class TeacherSeat:
    """Holds ``teacher``: who answers every question of the objects sharing this seat."""

    __slots__ = ("teacher",)

    def __init__(self, teacher: Any):
        self.teacher = teacher

    @staticmethod
    def of(teacher: Any) -> TeacherSeat:
        """``teacher`` when it is a seat, else a new seat holding it."""
        return teacher if isinstance(teacher, TeacherSeat) else TeacherSeat(teacher)

    def __repr__(self) -> str:
        return f"TeacherSeat({self.teacher!r})"


class SeatedTeacher:
    """A ``teacher`` attribute that reads and writes the owner's ``seat``: a descriptor, so
    that every ``self.teacher`` of the owner's code reads the seat at each use."""

    def __get__(self, owner: Any, cls: type | None = None) -> Any:
        return self if owner is None else owner.seat.teacher

    def __set__(self, owner: Any, teacher: Any) -> None:
        owner.seat.teacher = teacher
