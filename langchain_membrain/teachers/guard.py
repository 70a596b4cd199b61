"""Guarding an LLM teacher: its answers are untrusted input.

:class:`GuardedTeacher` is the base of :class:`~.llm.LLMTeacher` and
:class:`~.openai_teacher.OpenAITeacher`. A subclass only sends one request
(:meth:`GuardedTeacher._request` / :meth:`GuardedTeacher._arequest`); this module does the rest:

- **validation** of every answer against the tree (answers.py);
- **one retry** (``max_retries``) that quotes the rejected answer and the validation error
  back to the model; HTTP 429 waits for ``Retry-After`` (capped at ``max_backoff_s``) first;
- **fallback**: when the retries are spent, the decision comes from ``fallback`` (by default
  :class:`~.heuristic.HeuristicTeacher`, imported lazily; a last-resort rule, "attach here /
  Idle / keyword label", when that is missing or fails too). ``choose_*`` never raise to the
  caller (unless ``raise_on_failure=True``); ``try_*`` raise :class:`TeacherCallError`
  instead of falling back, for callers (the Learner) that fall back to their own model's
  decision;
- a **per-call timeout** and a **concurrency limit** (one semaphore shared by the sync and
  async paths). A sync request runs on a daemon thread (workers.py), waited for ``timeout``
  at most whatever the client's own timeout: abandoned then, it never blocks an exit;
- a **deadline** (:func:`~.budget.deadline`, per insert: ``teacher_budget``; a ``Cutoff``: ``close()``):
  a sync request is cut when it passes (kind ``"budget"``), and none is sent after it;
- a **circuit breaker** (:class:`~.budget.CircuitBreaker`): after ``threshold`` failed
  requests in a row no request is sent (:class:`TeacherUnavailable`) until a back-off has
  passed; one warning is logged (logger ``langchain_membrain``) when it opens and one when
  the teacher answers again. Answers slower than a deadline open a second breaker that only
  stops requests under a deadline (the questions go to the background instead), logged at
  INFO;
- **cost accounting** per stage (costs.py, ``teacher.stats()``); :meth:`requests_sent`
  counts the calling thread's requests, so a caller counts a question's exactly.

Each question is written once, as a generator that holds all of the logic above and does
no I/O (core.py); the sync and the async methods only drive it
(:meth:`GuardedTeacher._run`, :meth:`GuardedTeacher._arun`), so they cannot decide, retry
or count differently.

Retries are owned by the teacher: the openai SDK's own retries are switched off by
:class:`~.openai_teacher.OpenAITeacher` (give a LangChain model ``max_retries=0`` as well),
so ``timeout * (1 + max_retries)`` (plus a capped 429 wait) bounds the time one decision
can wait on the LLM.

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
import logging
import threading
import time
from typing import Any, Callable, Literal, Sequence, TypeVar

import numpy as np
from pydantic import BaseModel

from ..errors import MembrainError, TeacherError
from ..tree.actions import Action, apply_action, validate_action
from ..tree.placement import NEW_FACT, NewFact, Placement, Subtree, descend, destination
from ..tree.tree import Closure, MembrainTree
from . import budget, prompts
from .answers import (
    FEEDBACK_KINDS,
    AttachedView,
    RawAnswer,
    TeacherCallError,
    TeacherUnavailable,
    check_raw,
    classify_failure,
    clean_label,
    neighbourhood,
    resolve_actions,
    validate_stage1,
)
from .base import (
    BaseTeacher,
    LastResortTeacher,
    OperationTeacher,
    Teacher,
    capable,
    safe_actions,
    safe_choice,
)
from .core import Core, Done, Send, Sleep, advance
from .costs import TeacherStats
from .forming import FormationQuestions
from .workers import DaemonWorkers, acquire_within, wait_within

T = TypeVar("T")

logger = logging.getLogger("langchain_membrain")


def _default_fallback() -> Teacher:
    try:
        from .heuristic import HeuristicTeacher  # written by another engineer; lazy on purpose
    except ImportError:
        return LastResortTeacher()
    return HeuristicTeacher()


_DEFAULT = object()


class GuardedTeacher(FormationQuestions, BaseTeacher):
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
    """

    name = "llm"

    def __init__(self, *, mode: Literal["per_decision", "one_call"] = "one_call", fallback: Any = _DEFAULT,
                 timeout: float = 30.0, max_concurrency: int = 4, max_retries: int = 1,
                 max_backoff_s: float = 5.0, examples_per_aspect: int = 3, outline_max_aspects: int = 200,
                 outline_facts_per_node: int = 5, allow_aspects: bool = False, raise_on_failure: bool = False,
                 breaker: budget.CircuitBreaker | None = None, formation: bool = False):
        if mode not in ("per_decision", "one_call"):
            raise ValueError(f"mode must be 'per_decision' or 'one_call', not {mode!r}")
        if timeout <= 0 or max_concurrency < 1 or max_retries < 0:
            raise ValueError("timeout > 0, max_concurrency >= 1 and max_retries >= 0 are required")
        self.mode = mode
        self._fallback_arg = fallback
        self._fallback: Teacher | None = None
        self._last_resort = LastResortTeacher()
        self.timeout = float(timeout)
        self.max_concurrency = int(max_concurrency)
        self.max_retries = int(max_retries)
        self.max_backoff_s = float(max_backoff_s)
        self.examples_per_aspect = int(examples_per_aspect)
        self.outline_max_aspects = int(outline_max_aspects)
        self.outline_facts_per_node = int(outline_facts_per_node)
        self.allow_aspects = allow_aspects
        self.forms = bool(formation)
        self.raise_on_failure = raise_on_failure
        self._sem = threading.BoundedSemaphore(self.max_concurrency)
        self._stats = TeacherStats()
        self.breaker = breaker if breaker is not None else budget.CircuitBreaker()
        self._slow = self.breaker.twin()  # answers slower than a deadline (see budget.py)
        self._tls = threading.local()  # per thread: requests sent, the current request's timeout
        # The sync requests' threads, two per slot: an abandoned call frees its slot at once.
        self._workers = DaemonWorkers(2 * self.max_concurrency, name=f"{self.name}-teacher")

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
        return {**self.breaker.snapshot(), "slow": self._slow.snapshot()}

    def requests_sent(self) -> int:
        """Requests this teacher has sent from the calling thread (retries and failed ones
        included, questions it did not send excluded): a caller counts one question's
        requests as the difference around it."""
        return getattr(self._tls, "sent", 0)

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

    # ----------------------------------------------------------- stage 1
    # Each question is written once, as a core (``_*_core``, core.py); the public sync and
    # async methods only run that core with _run or _arun.
    def try_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """The LLM's stage-1 index, validated; TeacherCallError once the retries are spent."""
        return self._run(self._try_stage1_core(new_fact, subtree))

    async def atry_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return await self._arun(self._try_stage1_core(new_fact, subtree))

    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        """Stage 1 (never raises): the LLM's index, else the fallback's."""
        return self._run(self._choose_stage1_core(new_fact, subtree))

    async def achoose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return await self._arun(self._choose_stage1_core(new_fact, subtree))

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

        return (yield from self._ask_core("stage1", msgs, prompts.Stage1Answer, validate))

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
        return self._run(self._try_stage2_core(tree, closure))

    async def atry_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return await self._arun(self._try_stage2_core(tree, closure))

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        """Stage 2 (never raises): the LLM's actions, else the fallback's."""
        return self._run(self._choose_stage2_core(tree, closure))

    async def achoose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return await self._arun(self._choose_stage2_core(tree, closure))

    def _try_stage2_core(self, tree: MembrainTree, closure: Closure) -> Core[list[Action]]:
        self._stats.add("stage2", decisions=1, inserts=1)
        msgs, validate = self._stage2_question(tree, closure)
        return (yield from self._ask_core("stage2", msgs, prompts.Stage2Answer, validate))

    def _choose_stage2_core(self, tree: MembrainTree, closure: Closure) -> Core[list[Action]]:
        return (yield from self._or_fallback(self._try_stage2_core(tree, closure),
                                             lambda: self._fallback_stage2(tree, closure)))

    # -------------------------------------------------------- name_aspect
    def try_name_aspect(self, fact_texts: list[str]) -> str:
        return self._run(self._try_name_core(fact_texts))

    async def atry_name_aspect(self, fact_texts: list[str]) -> str:
        return await self._arun(self._try_name_core(fact_texts))

    def name_aspect(self, fact_texts: list[str]) -> str:
        """A 1 to 4 word label for a new aspect (never raises)."""
        return self._run(self._name_core(fact_texts))

    async def aname_aspect(self, fact_texts: list[str]) -> str:
        return await self._arun(self._name_core(fact_texts))

    def _try_name_core(self, fact_texts: list[str]) -> Core[str]:
        self._stats.add("name", decisions=1)
        msgs = prompts.name_messages(fact_texts, budget_chars=self._question_budget(prompts.AspectName))
        return (yield from self._ask_core("name", msgs, prompts.AspectName, lambda a: clean_label(a.label)))

    def _name_core(self, fact_texts: list[str]) -> Core[str]:
        return (yield from self._or_fallback(self._try_name_core(fact_texts),
                                             lambda: self._fallback_name(fact_texts)))

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
            return self._run(self._ask_core("operation", msgs, prompts.OperationAnswer, operation))
        # One call for the whole insert: the operation and, for a fact to store, its
        # placement (Operation.placement), which the insert then follows without asking again.
        msgs, ids = prompts.operation_place_messages(
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

        return self._run(self._ask_core("operation", msgs, prompts.OperationPlaceAnswer, validate))

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
        return self._run(self._try_place_core(new_fact, tree))

    async def atry_place(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        return await self._arun(self._try_place_core(new_fact, tree))

    def place(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        """One call for the whole insert (never raises): where ``new_fact`` goes and the
        stage-2 actions after it is attached. Attach under ``placement.parent_id``, then
        apply :meth:`placement_actions`."""
        return self._run(self._place_core(new_fact, tree))

    async def aplace(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        return await self._arun(self._place_core(new_fact, tree))

    def _try_place_core(self, new_fact: NewFact, tree: MembrainTree) -> Core[Placement]:
        self._stats.add("place", decisions=1, inserts=1)
        msgs, ids = prompts.place_messages(new_fact.text, tree, max_aspects=self.outline_max_aspects,
                                           facts_per_node=self.outline_facts_per_node, near=new_fact.embedding,
                                           budget_chars=self._question_budget(prompts.PlaceAnswer))
        return (yield from self._ask_core("place", msgs, prompts.PlaceAnswer, self._place_validator(tree, ids)))

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
        msgs, ids, first = prompts.place_batch_messages(
            [f.text for _, f in facts], tree, max_aspects=self.outline_max_aspects,
            facts_per_node=self.outline_facts_per_node, near=near,
            budget_chars=self._question_budget(prompts.PlaceBatchAnswer))
        return self._run(self._ask_core("place", msgs, prompts.PlaceBatchAnswer,
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

    def _fallback_placement(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        """Descend with the fallback teacher; stage 2 is left to it after the attach."""
        self._stats.add("place", fallbacks=1)
        parent = destination(descend(tree, new_fact, lambda sub: safe_choice(self.fallback, new_fact, sub)))
        return Placement(parent, tree.path(parent), [], fell_back=True)

    # ------------------------------------------------- driving a core (core.py)
    # _run and _arun are the only code that differs between the sync and async methods, so
    # the two cannot drift apart.
    def _run(self, core: Core[T]) -> T:
        """Run ``core`` on this thread (blocking)."""
        step = advance(core, None)
        while not isinstance(step, Done):
            step = advance(core, self._perform(step))
        return step.value

    async def _arun(self, core: Core[T]) -> T:
        """Run ``core`` on the event loop."""
        step = advance(core, None)
        while not isinstance(step, Done):
            step = advance(core, await self._aperform(step))
        return step.value

    def _perform(self, step: Send | Sleep) -> RawAnswer | Exception | None:
        """Carry out one step: a request's answer or what it raised (the core counts and
        classifies it); None after a sleep. Under a deadline (budget.deadline) the request's
        timeout is cut to what is left, and no request is sent once too little is left:
        the step then gives a TeacherUnavailable, as it does while a breaker is open."""
        end = budget.current_deadline()
        if isinstance(step, Sleep):
            seconds = step.seconds if end is None else min(step.seconds, max(0.0, end - time.monotonic()))
            time.sleep(seconds)
            return None
        timeout = self.timeout
        if end is not None:
            timeout = min(timeout, end - time.monotonic())
            if timeout < budget.MIN_REQUEST_S:
                return (TeacherUnavailable("closing", "the memory is closing: the question is dropped") if budget.cut_off()
                        else TeacherUnavailable("budget", "the insert's teacher budget is spent; asked in the background"))
        refused = self._admit(foreground=budget.insert_deadline() is not None)
        if refused is not None:
            return refused
        if not acquire_within(self._sem):
            self._release_probes()
            return TeacherUnavailable("busy", "every request slot stayed taken until the deadline")
        self._tls.sent = self.requests_sent() + 1
        self._tls.foreground = budget.insert_deadline() is not None
        try:
            return self._sync_request(step.messages, step.schema, timeout)
        except TeacherUnavailable as exc:  # queued behind abandoned calls, never started: not sent
            self._tls.sent -= 1
            self._release_probes()
            return exc
        except Exception as exc:  # noqa: BLE001 - handed to the core
            if timeout < self.timeout and classify_failure(exc).kind == "timeout":
                return TeacherCallError("budget", f"no answer within the insert's teacher budget ({timeout:.2g} s left)")
            return exc
        finally:
            self._sem.release()

    async def _aperform(self, step: Send | Sleep) -> RawAnswer | Exception | None:
        """As :meth:`_perform`, on the event loop (with no deadline). It polls the same
        (thread) semaphore, so that sync and async requests share one concurrency limit."""
        if isinstance(step, Sleep):
            await asyncio.sleep(step.seconds)
            return None
        refused = self._admit(foreground=False)
        if refused is not None:
            return refused
        while not self._sem.acquire(blocking=False):
            await asyncio.sleep(0.005)
        self._tls.sent = self.requests_sent() + 1
        self._tls.foreground = False
        try:
            return await asyncio.wait_for(self._arequest(step.messages, step.schema), self.timeout)
        except Exception as exc:  # noqa: BLE001 - handed to the core
            return exc
        finally:
            self._sem.release()

    # -------------------------------------------------------- the breakers
    def _admit(self, *, foreground: bool) -> TeacherUnavailable | None:
        """None when a request may be sent now, else why not. The slow breaker only stops
        requests under a deadline: in the background a slow teacher is still asked."""
        if not self.breaker.allow():
            return TeacherUnavailable("down", f"the teacher is not asked while it keeps failing "
                                              f"(retried in {self.breaker.snapshot()['retry_in_s']:g} s)")
        if foreground and not self._slow.allow():
            self.breaker.release()
            return TeacherUnavailable("slow", "the teacher answers slower than the insert's budget; "
                                              "asked in the background")
        return None

    def _release_probes(self) -> None:
        self.breaker.release()
        self._slow.release()

    def _answered(self) -> None:
        """A request was answered with a usable answer: both breakers close."""
        if self.breaker.success():
            logger.warning("membrain: the teacher %s answers again; inserts ask it again", self.describe())
        if getattr(self._tls, "foreground", False) and self._slow.success():
            logger.info("membrain: the teacher %s answers within the insert's budget again", self.describe())

    def _note_failure(self, err: TeacherCallError) -> None:
        """A request failed (a cut by the deadline tells nothing about the teacher's health)."""
        if err.kind == "budget":
            self.breaker.inconclusive()
            if budget.cut_off():  # cut by close(): tells nothing about the teacher's speed
                self._slow.release()
                return
            if self._slow.failure("budget"):
                logger.info("membrain: the teacher %s answered %d questions in a row slower than the insert's "
                            "budget: inserts are decided by the student or the offline rule and their questions "
                            "go to the background (retried in %g s)", self.describe(), self._slow.threshold,
                            self._slow.backoff_s)
            return
        self._slow.release()
        if self.breaker.failure(f"{err.kind}: {err.detail}"[:200]):
            logger.warning("membrain: the teacher %s is failing (%d failed requests in a row, the last %s: %s); "
                           "inserts are decided by the student or the offline rule, and the teacher is asked "
                           "again after %g s (back-off doubling up to %g s)", self.describe(),
                           self.breaker.threshold, err.kind, err.detail[:160], self.breaker.backoff_s,
                           self.breaker.max_backoff_s)
        else:
            logger.debug("membrain: teacher request failed (%s: %s)", err.kind, err.detail[:160])

    def _or_fallback(self, core: Core[T], fallback: Callable[[], T]) -> Core[T]:
        """``core``'s answer; when it raises TeacherError, ``fallback()``'s (or the error,
        with ``raise_on_failure``)."""
        try:
            return (yield from core)
        except TeacherError:
            if self.raise_on_failure:
                raise
            return fallback()

    def _ask_core(self, stage: str, messages: list[prompts.Message], schema: type[BaseModel],
                  validate: Callable[[Any], T]) -> Core[T]:
        """One guarded question: up to ``1 + max_retries`` requests, each counted with its
        latency and tokens; a failed answer is quoted back on the retry, a 429 waits first.
        Returns the validated answer or raises the last TeacherCallError. A request that is
        not sent (TeacherUnavailable) ends the question: counted as ``skipped`` when it was
        its first, never as a call."""
        msgs = messages
        last: TeacherCallError | None = None
        for attempt in range(1 + self.max_retries):
            if last is not None:
                msgs = self._next_messages(messages, last)
                if last.kind == "rate_limit":
                    yield Sleep(self._backoff(last))
            t0 = time.perf_counter()  # the latency includes the wait for a concurrency slot
            raw: RawAnswer | None = None
            reply = yield Send(msgs, schema)
            if isinstance(reply, TeacherUnavailable):
                if last is None:
                    self._stats.add(stage, skipped=1)
                raise last or reply
            if attempt:
                self._stats.add(stage, retries=1)
            self._stats.add(stage, max_prompt_tokens=prompts.prompt_tokens(msgs))
            try:
                if isinstance(reply, Exception):
                    raise reply
                raw = reply
                self._count_call(stage, raw, time.perf_counter() - t0)
                value = validate(check_raw(raw, schema))
            except Exception as exc:  # noqa: BLE001 - every failure is counted, none escapes
                if raw is None:
                    self._count_call(stage, None, time.perf_counter() - t0)
                last = self._failed(stage, exc, raw)
                if last.kind == "budget":
                    break  # no time is left for a retry: the question goes to the background
                continue
            self._answered()
            return value
        assert last is not None
        raise last

    # ------------------------------------------------------- the transport
    def _request_timeout(self) -> float:
        """The timeout of the request being sent from this thread (a deadline may cut it)."""
        return getattr(self._tls, "timeout", self.timeout)

    def _sync_request(self, msgs: list[prompts.Message], schema: type[BaseModel], timeout: float) -> RawAnswer:
        """Send one request on a worker thread; wait ``timeout`` s at most, or until this
        thread's deadline (workers.wait_within). A request past its time is abandoned."""
        future = self._workers.submit(self._request_on_worker, msgs, schema, timeout)
        ended = wait_within(future, timeout)
        if ended == "done":
            return future.result()
        if ended == "never_started":
            raise TeacherUnavailable("busy", "every worker thread is waiting on an abandoned call")
        raise (TeacherCallError("budget", "the deadline passed while the request was waited for")
               if ended == "deadline" else TeacherCallError("timeout", f"no answer within {timeout:g} s"))

    def _request_on_worker(self, msgs: list[prompts.Message], schema: type[BaseModel], timeout: float) -> RawAnswer:
        """:meth:`_request` on a worker thread, ``timeout`` its :meth:`_request_timeout`."""
        self._tls.timeout = timeout
        try:
            return self._request(msgs, schema)
        finally:
            self._tls.timeout = self.timeout

    def _count_call(self, stage: str, raw: RawAnswer | None, latency: float) -> None:
        if raw is None:
            self._stats.add(stage, calls=1, latency_s=latency)
        else:
            self._stats.add(stage, calls=1, latency_s=latency, prompt_tokens=raw.prompt_tokens or 0,
                            completion_tokens=raw.completion_tokens or 0)

    def _failed(self, stage: str, exc: BaseException, raw: RawAnswer | None) -> TeacherCallError:
        err = classify_failure(exc)
        if err.answer is None and raw is not None:
            err.answer = raw.text
        self._stats.add(stage, failures=1, failure_kind=err.kind)
        self._note_failure(err)
        return err

    @staticmethod
    def _next_messages(messages: list[prompts.Message], last: TeacherCallError) -> list[prompts.Message]:
        if last.kind in FEEDBACK_KINDS:
            return [*messages, prompts.retry_message(last.answer, last.detail)]
        return messages  # transport failures: the same question again

    def _backoff(self, err: TeacherCallError) -> float:
        return max(0.0, min(err.retry_after if err.retry_after is not None else 1.0, self.max_backoff_s))

    def close(self) -> None:
        """Release the idle worker threads; returns at once (one blocked in an abandoned
        request is a daemon: it never keeps the process alive)."""
        self._workers.shutdown()
