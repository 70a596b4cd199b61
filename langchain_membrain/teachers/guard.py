"""Guarding an LLM teacher: its answers are untrusted input.

:class:`GuardedTeacher` is the base of :class:`~.llm.LLMTeacher` and
:class:`~.openai_teacher.OpenAITeacher`. A subclass only sends one request
(:meth:`GuardedTeacher._request` / :meth:`GuardedTeacher._arequest`); the rest is done here
and in the modules it is split into, one concept each:

- **validation** of every answer against the tree (answers.py);
- **fallback**: when the retries are spent, the decision comes from ``fallback`` (by default
  :class:`~.heuristic.HeuristicTeacher`, imported lazily; a last-resort rule, "attach here /
  Idle / keyword label", when that is missing or fails too). ``choose_*`` never raise to the
  caller (unless ``raise_on_failure=True``); ``try_*`` raise :class:`TeacherCallError`
  instead of falling back, for callers (the Learner) that fall back to their own model's
  decision;
- **the line** to the endpoint (line.py, ``teacher.line``): the retry with the error quoted,
  the per-call timeout, the concurrency limit, the deadline, the circuit breakers and the
  cost accounting; each question is one guarded question on it;
- **the questions**: the joint placement (``place``), the batch (``place_batch``) and the
  memory operation here; the elementary ones (stage 1, stage 2, an aspect's name) in
  elementary.py; the formation question in forming.py.

Modes. The insert asks :meth:`place`, the joint question, once: the model sees an outline
of the tree and names the destination (the path is the destination's path) and the stage-2
actions together. ``mode`` sets the memory operation's question: ``"one_call"`` (the default)
asks the operation and, for a fact to store, its placement in one request
(``Operation.placement``, which the insert then follows); ``"per_decision"`` asks the
operation alone. ``choose_stage1`` and ``choose_stage2`` (the :class:`~.base.Teacher`
protocol's elementary questions) ask one question per tree level and one for stage 2.
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable, Literal, Sequence, TypeVar

import numpy as np
from pydantic import BaseModel

from ..errors import MembrainError, TeacherError
from ..tree.actions import Action, apply_action, validate_action
from ..tree.placement import NEW_FACT, NewFact, Placement, descend, destination
from ..tree.tree import MembrainTree
from . import budget, outline, prompts
from .answers import AttachedView, RawAnswer, TeacherCallError, neighbourhood, resolve_actions
from .base import BaseTeacher, LastResortTeacher, OperationTeacher, Teacher, capable, safe_actions, safe_choice
from .core import Core
from .costs import TeacherStats
from .elementary import ElementaryQuestions
from .forming import FormationQuestions
from .line import OnTheLine, RequestLine

T = TypeVar("T")


def _default_fallback() -> Teacher:
    try:
        from .heuristic import HeuristicTeacher  # written by another engineer; lazy on purpose
    except ImportError:
        return LastResortTeacher()
    return HeuristicTeacher()


_DEFAULT = object()


class GuardedTeacher(ElementaryQuestions, FormationQuestions, BaseTeacher):
    """Base of the LLM teachers: prompts, validation, retry, fallback, limits and stats.

    Args:
        mode: ``"one_call"`` (the default: the memory operation's question places the fact
            too) or ``"per_decision"`` (the operation asked alone); see the module docstring.
        fallback: the teacher that decides when the LLM's answers are unusable; default
            :class:`~.heuristic.HeuristicTeacher` (lazily imported); ``None``: the
            last-resort rule only.
        timeout: seconds one request may take.
        max_concurrency: requests in flight at once, sync and async together.
        max_retries: extra attempts per decision after a failed one (default 1).
        max_backoff_s: longest wait honoured from a 429's ``Retry-After``.
        examples_per_aspect: example facts shown under each aspect.
        outline_max_aspects, outline_facts_per_node: size of the one-call outline.
        allow_aspects: let Promote/Demote move aspects (with their subtrees).
        raise_on_failure: ``choose_*``/``place`` raise :class:`TeacherCallError` instead of
            falling back, for a caller with a fallback of its own (the Learner uses its
            model's decision). Off by default: then they never raise.
        breaker: the :class:`~.budget.CircuitBreaker` for failed requests (default: 3
            failures in a row, back-off 10 s doubling up to 300 s); its settings and clock
            are copied for the second breaker, the one for answers slower than a deadline.
        formation: the teacher forms facts, experiences and a session summary from each
            input (README, Memory kinds); off by default, as it costs a question per input.
    """

    name = "llm"
    # Settings of the teacher's line (line.py), read and written through the teacher.
    timeout = OnTheLine[float]()
    max_concurrency = OnTheLine[int]()
    max_retries = OnTheLine[int]()
    max_backoff_s = OnTheLine[float]()
    breaker = OnTheLine[budget.CircuitBreaker]()

    def __init__(self, *, mode: Literal["per_decision", "one_call"] = "one_call", fallback: Any = _DEFAULT,
                 timeout: float = 30.0, max_concurrency: int = 4, max_retries: int = 1,
                 max_backoff_s: float = 5.0, examples_per_aspect: int = 3, outline_max_aspects: int = 200,
                 outline_facts_per_node: int = 5, allow_aspects: bool = False, raise_on_failure: bool = False,
                 breaker: budget.CircuitBreaker | None = None, formation: bool = False):
        if mode not in ("per_decision", "one_call"):
            raise ValueError(f"mode must be 'per_decision' or 'one_call', not {mode!r}")
        self._stats = TeacherStats()
        self.line = RequestLine(self._request, self._arequest, self.describe, self._stats, name=self.name,
                                timeout=timeout, max_concurrency=max_concurrency, max_retries=max_retries,
                                max_backoff_s=max_backoff_s, breaker=breaker)
        self.mode = mode
        self._fallback_arg = fallback
        self._fallback: Teacher | None = None
        self._last_resort = LastResortTeacher()
        self.examples_per_aspect = int(examples_per_aspect)
        self.outline_max_aspects = int(outline_max_aspects)
        self.outline_facts_per_node = int(outline_facts_per_node)
        self.allow_aspects = allow_aspects
        self.forms = bool(formation)
        self.raise_on_failure = raise_on_failure

    # ------------------------------------------------------- to implement
    def _request(self, messages: list[prompts.Message], schema: type[BaseModel]) -> RawAnswer:
        """Send one request and return the raw structured answer (may raise anything)."""
        raise NotImplementedError

    async def _arequest(self, messages: list[prompts.Message], schema: type[BaseModel]) -> RawAnswer:
        return await asyncio.to_thread(self._request, messages, schema)

    # ------------------------------------------------------------- public
    @property
    def fallback(self) -> Teacher:
        """The fallback teacher (built on first use)."""
        if self._fallback is None:
            arg = self._fallback_arg
            self._fallback = _default_fallback() if arg is _DEFAULT else (arg or self._last_resort)
        return self._fallback

    def stats(self) -> dict[str, Any]:
        """Per-stage counters as a dict: see :class:`StageStats`; plus ``total``, ``inserts``
        and ``calls_per_insert``."""
        out = self._stats.as_dict()
        out["mode"] = self.mode
        return out

    def health(self) -> dict[str, Any]:
        """The circuit breakers' state (:meth:`~.budget.CircuitBreaker.snapshot`: ``state``,
        ``consecutive_failures``, ``retry_in_s``...), with ``slow``: the breaker for answers
        slower than an insert's budget."""
        return self.line.health()

    def requests_sent(self) -> int:
        """Requests this teacher has sent from the calling thread (retries and failed ones
        included, questions it did not send excluded): a caller counts one question's
        requests as the difference around it."""
        return self.line.requests_sent()

    def close(self) -> None:
        """Release the idle worker threads; returns at once (one blocked in an abandoned
        request is a daemon: it never keeps the process alive)."""
        self.line.close()

    def describe(self) -> str:
        """Who this teacher is, for log lines."""
        return type(self).__name__

    def _extra_prompt_chars(self, schema: type[BaseModel]) -> int:
        """Characters the transport adds to a question's messages (0: none)."""
        return 0

    def _question_budget(self, schema: type[BaseModel]) -> int:
        """Characters a question's messages may take (prompts.PROMPT_BUDGET_TOKENS in all,
        the retry's room and what the transport adds aside)."""
        return prompts.QUESTION_BUDGET_CHARS - self._extra_prompt_chars(schema)

    def reset_stats(self) -> None:
        self._stats.reset()

    # ---------------------------------------------------------- operation
    def try_operation(self, question: Any) -> Any:
        """The LLM's memory operation for ``question`` (operation_types.OperationQuestion),
        validated: a target that is not a shown number, or an UPDATE/DELETE without one,
        is rejected (and retried once with the error quoted). TeacherCallError when
        unusable."""
        from ..tree.operation_types import Operation

        self._stats.add("operation", decisions=1)
        cands = list(question.candidates)
        shown = [(c.text, c.valid_from) for c in cands]
        tree = getattr(question, "tree", None)

        def operation(answer: Any) -> Operation:
            if answer.operation in ("UPDATE", "DELETE"):
                t = answer.target
                if t is None or not 1 <= t <= len(cands):
                    raise TeacherCallError("invalid", f"target {t} is not the number of a fact shown")
                return Operation(answer.operation, cands[t - 1].key, keep=bool(answer.keep))
            return Operation(answer.operation)

        if self.mode != "one_call" or tree is None:
            msgs = prompts.operation_messages(question.text, shown,
                                              budget_chars=self._question_budget(prompts.OperationAnswer))
            return self.line.run(self.line.ask("operation", msgs, prompts.OperationAnswer, operation))
        # One call for the whole insert: the operation and, for a fact to store, its
        # placement (Operation.placement), which the insert then follows without asking again.
        msgs, ids = outline.operation_place_messages(
            question.text, shown, tree, max_aspects=self.outline_max_aspects,
            facts_per_node=self.outline_facts_per_node, near=getattr(question, "embedding", None),
            budget_chars=self._question_budget(prompts.OperationPlaceAnswer))
        place = self._place_validator(tree, ids)

        def validate(answer: prompts.OperationPlaceAnswer) -> Operation:
            op = operation(answer)
            if op.kind == "ADD" or (op.kind == "DELETE" and op.keep):
                if answer.parent is None:
                    raise TeacherCallError("invalid", f"{op.kind} without a parent")
                placement = place(prompts.PlaceAnswer(parent=answer.parent, actions=answer.actions or []))
                self._stats.add("place", decisions=1, inserts=1, from_placement=1)
                return Operation(op.kind, op.target, op.keep, placement)
            return op

        return self.line.run(self.line.ask("operation", msgs, prompts.OperationPlaceAnswer, validate))

    def choose_operation(self, question: Any) -> Any:
        """The memory operation (never raises unless ``raise_on_failure``): the LLM's,
        else the fallback teacher's, else the conservative offline rule."""
        try:
            return self.try_operation(question)
        except TeacherError:
            if self.raise_on_failure:
                raise
            self._stats.add("operation", fallbacks=1)
            if capable(self.fallback, OperationTeacher):
                try:
                    return self.fallback.choose_operation(question)
                except Exception:  # noqa: BLE001 - the fallback's failure: the offline rule
                    pass
            from .operation_rule import conservative_operation

            return conservative_operation(question)

    # ------------------------------------------------------ one-call place
    def _place_validator(self, tree: MembrainTree, ids: list[str]) -> Callable[[prompts.PlaceAnswer], Placement]:
        def validate(answer: prompts.PlaceAnswer) -> Placement:
            p = answer.parent
            if not 1 <= p < len(ids) or tree.node(ids[p]).kind == "fact":
                raise TeacherCallError("invalid", f"parent {p} is not the number of the root or of an aspect shown")
            parent = ids[p]
            ids_new = [NEW_FACT, *ids[1:]]
            actions = resolve_actions(answer.actions, ids_new, AttachedView(tree, parent),
                                      allowed=neighbourhood(tree, parent, NEW_FACT),
                                      allow_aspects=self.allow_aspects)
            return Placement(parent, tree.path(parent), actions)
        return validate

    def try_place(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        """The LLM's one-call placement, validated; TeacherCallError when unusable."""
        return self.line.run(self._try_place_core(new_fact, tree))

    async def atry_place(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        return await self.line.arun(self._try_place_core(new_fact, tree))

    def place(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        """One call for the whole insert (never raises): where ``new_fact`` goes and the
        stage-2 actions after it is attached. Attach under ``placement.parent_id``, then
        apply :meth:`placement_actions`."""
        return self.line.run(self._place_core(new_fact, tree))

    async def aplace(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        return await self.line.arun(self._place_core(new_fact, tree))

    def _try_place_core(self, new_fact: NewFact, tree: MembrainTree) -> Core[Placement]:
        self._stats.add("place", decisions=1, inserts=1)
        msgs, ids = outline.place_messages(new_fact.text, tree, max_aspects=self.outline_max_aspects,
                                           facts_per_node=self.outline_facts_per_node, near=new_fact.embedding,
                                           budget_chars=self._question_budget(prompts.PlaceAnswer))
        return (yield from self.line.ask("place", msgs, prompts.PlaceAnswer, self._place_validator(tree, ids)))

    def _place_core(self, new_fact: NewFact, tree: MembrainTree) -> Core[Placement]:
        return (yield from self._or_fallback(self._try_place_core(new_fact, tree),
                                             lambda: self._fallback_placement(new_fact, tree)))

    def placement_actions(self, tree: MembrainTree, fact_id: str, placement: Placement) -> list[Action]:
        """Stage 2 of a placed fact: the placement's actions bound to ``fact_id`` and checked
        against the tree as it is now; the fallback teacher's when the placement fell back."""
        if placement.fell_back:
            self._stats.add("stage2", fallbacks=1)
            return safe_actions(self.fallback, tree, tree.closure(fact_id), allow_aspects=self.allow_aspects)
        out = []
        for action in placement.bind(fact_id):
            try:
                validate_action(tree, action, allow_aspects=self.allow_aspects)
            except MembrainError:
                continue  # the tree changed since the placement (concurrent writer)
            out.append(action)
        return out

    # ------------------------------------------------------ batch question
    def place_batch(self, facts: Sequence[tuple[str, NewFact]], tree: MembrainTree) -> list[Placement]:
        """One request about several new facts (``(id, fact)`` pairs, none of them in
        ``tree``): where each goes and the actions once it is attached, each placement
        valid on the tree as the earlier ones leave it (Learner.settle_batch). Raises
        TeacherCallError when the answer is unusable; there is no fallback."""
        self._stats.add("place", decisions=len(facts), inserts=len(facts))
        embs = [np.asarray(f.embedding, dtype=np.float32) for _, f in facts if f.embedding is not None]
        near = np.mean(embs, axis=0) if embs else None
        msgs, ids, first = outline.place_batch_messages(
            [f.text for _, f in facts], tree, max_aspects=self.outline_max_aspects,
            facts_per_node=self.outline_facts_per_node, near=near,
            budget_chars=self._question_budget(prompts.PlaceBatchAnswer))
        return self.line.run(self.line.ask("place", msgs, prompts.PlaceBatchAnswer,
                                        self._batch_validator(tree, ids, first, facts)))

    def _batch_validator(self, tree: MembrainTree, ids: list[str], first: int,
                         facts: Sequence[tuple[str, NewFact]]) -> Callable[[prompts.PlaceBatchAnswer], list[Placement]]:
        def validate(answer: prompts.PlaceBatchAnswer) -> list[Placement]:
            numbers = [e.fact for e in answer.placements]
            if numbers != list(range(first, first + len(facts))):
                raise TeacherCallError("invalid", f"give one placement per new fact, numbered {first} to "
                                                  f"{first + len(facts) - 1}, in that order")
            numbered = [*ids, *(fid for fid, _ in facts)]
            view, out = tree.copy(), []
            for (fid, fact), entry in zip(facts, answer.placements):
                p = entry.parent
                if not 1 <= p < len(ids) or tree.node(ids[p]).kind == "fact":
                    raise TeacherCallError("invalid", f"fact {entry.fact}: parent {p} is not the root or an aspect shown")
                parent = ids[p]
                view.add_fact(parent, fact.text, embedding=fact.embedding, node_id=fid)
                actions = resolve_actions(entry.actions, numbered, view, allowed=neighbourhood(view, parent, fid),
                                          allow_aspects=self.allow_aspects)
                for a in actions:
                    try:
                        apply_action(view, a, allow_aspects=self.allow_aspects)
                    except MembrainError as exc:
                        raise TeacherCallError("invalid", f"fact {entry.fact}: {exc}") from None
                out.append(Placement(parent, tree.path(parent), actions))
            return out
        return validate

    def _fallback_placement(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        """Descend with the fallback teacher; stage 2 is left to it after the attach."""
        self._stats.add("place", fallbacks=1)
        parent = destination(descend(tree, new_fact, lambda sub: safe_choice(self.fallback, new_fact, sub)))
        return Placement(parent, tree.path(parent), [], fell_back=True)

    def _or_fallback(self, core: Core[T], fallback: Callable[[], T]) -> Core[T]:
        """``core``'s answer; when it raises TeacherError, ``fallback()``'s (or the error,
        with ``raise_on_failure``)."""
        try:
            return (yield from core)
        except TeacherError:
            if self.raise_on_failure:
                raise
            return fallback()
