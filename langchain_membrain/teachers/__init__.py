"""Teachers: the decision makers the small models imitate."""

from .base import BaseTeacher, NewFact, Subtree, Teacher

__all__ = ["BaseTeacher", "NewFact", "Subtree", "Teacher"]
