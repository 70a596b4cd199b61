"""Teachers: the decision makers the small models imitate.

- :class:`HeuristicTeacher`: offline embedding rules (the default when no LLM is configured).
- :class:`LLMTeacher`: any LangChain chat model with structured output.
- :class:`OpenAITeacher`: any OpenAI-compatible endpoint, straight on the ``openai`` SDK.
"""

from .base import BaseTeacher, NewFact, Subtree, Teacher
from .guard import GuardedTeacher, Placement, TeacherCallError, TeacherStats, insert_with_placement
from .heuristic import HeuristicConfig, HeuristicTeacher
from .llm import LLMTeacher, as_teacher
from .openai_teacher import OpenAITeacher

__all__ = [
    "BaseTeacher",
    "GuardedTeacher",
    "HeuristicConfig",
    "HeuristicTeacher",
    "LLMTeacher",
    "NewFact",
    "OpenAITeacher",
    "Placement",
    "Subtree",
    "Teacher",
    "TeacherCallError",
    "TeacherStats",
    "as_teacher",
    "insert_with_placement",
]
