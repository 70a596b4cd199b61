"""Teachers: the decision makers the small models imitate.

- :class:`HeuristicTeacher`: offline embedding rules (the default when no LLM is configured).
- :class:`LLMTeacher`: any LangChain chat model with structured output.
- :class:`OpenAITeacher`: any OpenAI-compatible endpoint, straight on the ``openai`` SDK.

The names are imported on first use (PEP 562): importing a light submodule such as
``teachers.base`` does not load the LangChain or OpenAI SDKs.

Also owns the offline rule of the memory operation (:mod:`.operation_rule`: ADD, UPDATE,
DELETE, IGNORE from the text alone).

May import: ``errors``, ``tree``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..tree.placement import NewFact, Placement, Subtree
    from .answers import TeacherCallError, TeacherUnavailable
    from .base import BaseTeacher, Teacher
    from .budget import CircuitBreaker
    from .costs import TeacherStats
    from .guard import GuardedTeacher
    from .heuristic import HeuristicConfig, HeuristicTeacher
    from .llm import LLMTeacher
    from .openai_teacher import OpenAITeacher
    from .resolve import as_teacher, resolve_teacher

# public name -> the submodule that defines it
_LAZY: dict[str, str] = {
    "BaseTeacher": ".base",
    "NewFact": ".base",
    "Subtree": ".base",
    "Teacher": ".base",
    "CircuitBreaker": ".budget",
    "GuardedTeacher": ".guard",
    "Placement": ".guard",
    "TeacherCallError": ".answers",
    "TeacherStats": ".costs",
    "TeacherUnavailable": ".answers",
    "HeuristicConfig": ".heuristic",
    "HeuristicTeacher": ".heuristic",
    "LLMTeacher": ".llm",
    "as_teacher": ".resolve",
    "OpenAITeacher": ".openai_teacher",
    "resolve_teacher": ".resolve",
}

__all__ = [
    "BaseTeacher",
    "CircuitBreaker",
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
    "TeacherUnavailable",
    "as_teacher",
    "resolve_teacher",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
