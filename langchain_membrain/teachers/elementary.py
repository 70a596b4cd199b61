"""The elementary questions asked of an LLM teacher: :class:`ElementaryQuestions`, the part
of the guarded LLM teachers (guard.py) that answers the :class:`~.base.Teacher` protocol's
questions one at a time: stage 1 (which candidate a new fact descends to, one question per
tree level), stage 2 (the actions on a closure) and an aspect's name.

Each question has four methods: ``try_*`` (validated; :class:`~.answers.TeacherCallError`
once the retries are spent, for a caller with a fallback of its own), ``choose_*`` /
``name_aspect`` (never raise: the fallback teacher's answer then), and their async twins.
All of them run one core (core.py) on the teacher's line (line.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, TypeVar

from pydantic import BaseModel

from ..tree.actions import Action
from ..tree.placement import NewFact, Subtree
from ..tree.tree import Closure, MembrainTree
from . import prompts
from .answers import TeacherCallError, clean_label, resolve_actions, validate_stage1
from .base import LastResortTeacher, Teacher, safe_actions, safe_choice
from .core import Core

if TYPE_CHECKING:
    from .costs import TeacherStats
    from .line import RequestLine

T = TypeVar("T")


class ElementaryQuestions:
    """Mixed into the guarded LLM teachers: stage 1, stage 2 and ``name_aspect``, each asked
    as one guarded question on the teacher's line, with the fallback teacher's answer when
    the LLM's is unusable."""

    if TYPE_CHECKING:  # what GuardedTeacher provides (guard.py)
        line: RequestLine
        _stats: TeacherStats
        _last_resort: LastResortTeacher
        examples_per_aspect: int
        allow_aspects: bool

        @property
        def fallback(self) -> Teacher: ...

        def _question_budget(self, schema: type[BaseModel]) -> int: ...

        def _or_fallback(self, core: Core[T], fallback: Callable[[], T]) -> Core[T]: ...

    # ----------------------------------------------------------- stage 1
    # Each question is written once, as a core (``_*_core``, core.py); the public sync and
    # async methods only run that core on the line (line.run or line.arun).
    def try_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """The LLM's stage-1 index, validated; TeacherCallError once the retries are spent."""
        return self.line.run(self._try_stage1_core(new_fact, subtree))

    async def atry_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return await self.line.arun(self._try_stage1_core(new_fact, subtree))

    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """Stage 1 (never raises): the LLM's index, else the fallback's."""
        return self.line.run(self._choose_stage1_core(new_fact, subtree))

    async def achoose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return await self.line.arun(self._choose_stage1_core(new_fact, subtree))

    def _try_stage1_core(self, new_fact: NewFact, subtree: Subtree) -> Core[int]:
        self._stats.add("stage1", decisions=1)
        msgs, shown = prompts.stage1_question(new_fact.text, subtree.tree, subtree.node_id, subtree.candidates,
                                              examples=self.examples_per_aspect, near=new_fact.embedding,
                                              budget_chars=self._question_budget(prompts.Stage1Answer))
        numbers = set(shown)

        def validate(answer: prompts.Stage1Answer) -> int:
            choice = validate_stage1(answer, len(subtree.candidates))
            if choice not in numbers:
                raise TeacherCallError("invalid", f"choice {choice} is not one of the numbers shown")
            return choice

        return (yield from self.line.ask("stage1", msgs, prompts.Stage1Answer, validate))

    def _choose_stage1_core(self, new_fact: NewFact, subtree: Subtree) -> Core[int]:
        return (yield from self._or_fallback(self._try_stage1_core(new_fact, subtree),
                                             lambda: self._fallback_stage1(new_fact, subtree)))

    # ----------------------------------------------------------- stage 2
    def _stage2_question(self, tree: MembrainTree, closure: Closure):
        msgs, ids = prompts.stage2_question(tree, closure, examples=min(self.examples_per_aspect, 2),
                                            budget_chars=self._question_budget(prompts.Stage2Answer))
        allowed = {i for i in ids if i}  # the members shown (a crowded closure is cut to the budget)

        def validate(answer: prompts.Stage2Answer) -> list[Action]:
            return resolve_actions(answer.actions, ids, tree, allowed=allowed, allow_aspects=self.allow_aspects)

        return msgs, validate

    def try_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        """The LLM's action series for ``closure``, validated; TeacherCallError when unusable."""
        return self.line.run(self._try_stage2_core(tree, closure))

    async def atry_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return await self.line.arun(self._try_stage2_core(tree, closure))

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        """Stage 2 (never raises): the LLM's actions, else the fallback's."""
        return self.line.run(self._choose_stage2_core(tree, closure))

    async def achoose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return await self.line.arun(self._choose_stage2_core(tree, closure))

    def _try_stage2_core(self, tree: MembrainTree, closure: Closure) -> Core[list[Action]]:
        self._stats.add("stage2", decisions=1, inserts=1)
        msgs, validate = self._stage2_question(tree, closure)
        return (yield from self.line.ask("stage2", msgs, prompts.Stage2Answer, validate))

    def _choose_stage2_core(self, tree: MembrainTree, closure: Closure) -> Core[list[Action]]:
        return (yield from self._or_fallback(self._try_stage2_core(tree, closure),
                                             lambda: self._fallback_stage2(tree, closure)))

    # -------------------------------------------------------- name_aspect
    def try_name_aspect(self, fact_texts: list[str]) -> str:
        return self.line.run(self._try_name_core(fact_texts))

    async def atry_name_aspect(self, fact_texts: list[str]) -> str:
        return await self.line.arun(self._try_name_core(fact_texts))

    def name_aspect(self, fact_texts: list[str]) -> str:
        """A 1 to 4 word label for a new aspect (never raises)."""
        return self.line.run(self._name_core(fact_texts))

    async def aname_aspect(self, fact_texts: list[str]) -> str:
        return await self.line.arun(self._name_core(fact_texts))

    def _try_name_core(self, fact_texts: list[str]) -> Core[str]:
        self._stats.add("name", decisions=1)
        msgs = prompts.name_messages(fact_texts, budget_chars=self._question_budget(prompts.AspectName))
        return (yield from self.line.ask("name", msgs, prompts.AspectName, lambda a: clean_label(a.label)))

    def _name_core(self, fact_texts: list[str]) -> Core[str]:
        return (yield from self._or_fallback(self._try_name_core(fact_texts),
                                             lambda: self._fallback_name(fact_texts)))

    # ------------------------------------------------------------ fallback
    def _fallback_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        self._stats.add("stage1", fallbacks=1)
        return safe_choice(self.fallback, new_fact, subtree)

    def _fallback_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        self._stats.add("stage2", fallbacks=1)
        return safe_actions(self.fallback, tree, closure, allow_aspects=self.allow_aspects)

    def _fallback_name(self, fact_texts: list[str]) -> str:
        self._stats.add("name", fallbacks=1)
        try:
            return clean_label(self.fallback.name_aspect(fact_texts))
        except Exception:  # noqa: BLE001
            return self._last_resort.name_aspect(fact_texts)

