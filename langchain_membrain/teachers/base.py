"""The Teacher protocol: who decides, when the models are not trusted yet.

The question the learner asks is the **joint question** about one insert,
``place(new_fact, tree) -> Placement``: the path from the root to the parent the new fact
goes under, the stage-2 actions once it is attached there, and the labels of the aspects
those actions create (placement.py). One placement is one teacher question, whatever the
tree's depth. :func:`teacher_placement` answers it from the three elementary questions
below, on a copy of the tree, for teachers that answer in-process (the heuristic and the
oracle); the LLM teachers answer it in one request (guard.py).

The elementary questions:

- stage 1, ``choose_stage1(new_fact, subtree) -> int``: index into ``subtree.candidates``
  (0 is the current node, meaning "attach here"; any other index is a child aspect to
  descend into);
- stage 2, ``choose_stage2(tree, closure) -> list[Action]``: the action series for a closure
  (an empty list is all Idle);
- ``name_aspect(fact_texts) -> str``: a short label (1 to 4 words) for a new aspect.

A teacher may set ``fast = True`` when it answers in-process without I/O (the offline
teachers do). A memory's background worker asks any other teacher on a copy of the tree,
holding no lock, so that adds are never held up by its answers.

A teacher may set ``names_topics = False`` when its aspect labels do not name topics (the
offline rule's are keyword clusters of the embeddings): search then leaves the topic match
off (``RetrievalConfig.tree_topic_weight``) and the offline labeller renames aspects between
naming questions. A teacher that says nothing names topics (:func:`names_topics`), as an LLM's
labels do. Behaviour follows these attributes, never a teacher's class.

Each has an async twin (``a``-prefixed); :class:`BaseTeacher` runs the sync one in a
thread by default.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter
from typing import Any, Protocol, Sequence, TypeGuard, TypeVar, runtime_checkable

import numpy as np

from ..errors import MembrainError, TeacherError
from ..tree.actions import Action, Group, apply_action, past_height, validate_action
from ..tree.placement import NEW_FACT, NewFact, Placement, Subtree, descend, destination
from ..tree.tree import Closure, MembrainTree


@runtime_checkable
class Teacher(Protocol):
    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int: ...

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]: ...

    def name_aspect(self, fact_texts: list[str]) -> str: ...

    async def achoose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int: ...

    async def achoose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]: ...

    async def aname_aspect(self, fact_texts: list[str]) -> str: ...


# ------------------------------------------------------------------ what else a teacher answers
# Each capability beyond the Teacher protocol is a protocol of its own, checked where it is
# used with capable() (runtime_checkable: the members' presence, once per teacher class).
@runtime_checkable
class JointTeacher(Protocol):
    """Answers the joint question itself (an LLM: one request), not from its elementary answers."""

    def place(self, new_fact: NewFact, tree: MembrainTree) -> Placement: ...


@runtime_checkable
class BatchTeacher(Protocol):
    """Answers the batch question (``LearnerConfig.batch``): one placement per ``(id, fact)``."""

    def place_batch(self, facts: Sequence[tuple[str, NewFact]], tree: MembrainTree) -> list[Placement]: ...


@runtime_checkable
class OperationTeacher(Protocol):
    """Decides memory operations (ADD, UPDATE, DELETE, IGNORE; operations.py)."""

    def choose_operation(self, question: Any) -> Any: ...


@runtime_checkable
class RemoteTeacher(Protocol):
    """A teacher whose questions are requests that can fail (the guarded LLM teachers):
    ``try_*`` raise instead of falling back, ``fallback`` answers when they fail,
    ``requests_sent`` counts this thread's requests, ``mode`` says whether the memory
    operation's question places the item too ("one_call")."""

    mode: str

    @property
    def fallback(self) -> Teacher: ...

    def requests_sent(self) -> int: ...

    def try_name_aspect(self, fact_texts: list[str]) -> str: ...

    def try_operation(self, question: Any) -> Any: ...

    def stats(self) -> dict[str, Any]: ...

    def health(self) -> dict[str, Any]: ...


P = TypeVar("P")
_CAPABLE: dict[tuple[type, type], bool] = {}  # a cache: (teacher class, protocol) -> capable


def capable(teacher: object, protocol: type[P]) -> TypeGuard[P]:
    """``isinstance(teacher, protocol)`` for one of the protocols above, decided once per
    teacher class: a runtime protocol check reads every member (tens of microseconds), and
    the insert asks it at every question."""
    key = (type(teacher), protocol)
    found = _CAPABLE.get(key)
    if found is None:
        found = _CAPABLE[key] = isinstance(teacher, protocol)
    return found


def is_fast(teacher: object) -> bool:
    """Whether ``teacher`` answers in-process without I/O (it says ``fast = True``)."""
    return bool(getattr(teacher, "fast", False))


def names_topics(teacher: object) -> bool:
    """Whether ``teacher``'s aspect labels name topics: its ``names_topics`` attribute, True
    when it has none (a third-party teacher is taken to name topics, as an LLM does; the
    offline rule says False)."""
    return bool(getattr(teacher, "names_topics", True))


def teacher_placement(teacher: Teacher, new_fact: NewFact, tree: MembrainTree) -> Placement:
    """The joint answer of a teacher that only answers the elementary questions: descend by
    ``choose_stage1``, attach the fact to a copy of ``tree`` as :data:`NEW_FACT`, ask
    ``choose_stage2`` on its closure, and name each Group's aspect with ``name_aspect``
    (``tree`` is not changed); a Group the tree's height bound has no room for is left
    out. Raises :class:`~langchain_membrain.errors.TeacherError` when
    an answer is not valid: an index that is not a candidate's, an action that does not
    apply, an empty label."""
    def choose(sub: Subtree) -> int:
        i = teacher.choose_stage1(new_fact, sub)
        if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < len(sub.candidates):
            raise TeacherError(f"stage-1 answer {i!r} is not a candidate's index")
        return int(i)

    parent = destination(descend(tree, new_fact, choose))
    view = tree.copy()
    view.add_fact(parent, new_fact.text, embedding=new_fact.embedding, node_id=NEW_FACT,
                  metadata=new_fact.metadata)
    actions: list[Action] = []
    for a in teacher.choose_stage2(view, view.closure(NEW_FACT)):
        if isinstance(a, Group) and past_height(view, a):
            continue  # the tree's height bound: this group is left out, the rest of the answer stands
        if isinstance(a, Group) and not a.label:
            label = teacher.name_aspect([view.node(i).text for i in a.node_ids if i in view])
            if not isinstance(label, str) or not label.strip():
                raise TeacherError(f"aspect label {label!r} is empty")
            a = Group(a.node_ids, label, a.metadata, a.aspect_id)
        try:
            # Aspect moves are checked as moves here; whether they are executed is the
            # executor's setting (LearnerConfig.allow_aspects), which re-validates each action.
            apply_action(view, a, allow_aspects=True)
        except MembrainError as exc:
            raise TeacherError(f"stage-2 action {a!r} does not apply: {exc}") from None
        actions.append(a)
    return Placement(parent, tree.path(parent), actions)


def ask_placement(teacher: Teacher, new_fact: NewFact, tree: MembrainTree) -> Placement:
    """The teacher's answer to the joint question (its own ``place`` when it has one)."""
    if capable(teacher, JointTeacher):
        return teacher.place(new_fact, tree)
    return teacher_placement(teacher, new_fact, tree)


def sequential_placements(teacher: Teacher, facts: Sequence[tuple[str, NewFact]],
                          tree: MembrainTree) -> list[Placement]:
    """The batch question answered one fact after another, on a copy of ``tree``: each
    placement is the teacher's joint answer on the tree as the earlier ones left it (the
    earlier facts attached under their ids, their actions applied). Actions name the facts
    by their ids, and every Group carries the id of the aspect it creates, so that a later
    placement may put its fact under it. What a teacher that answers in-process, standing
    for an LLM that reads all the facts in one request, gives as its ``place_batch``."""
    view = tree.copy()
    out: list[Placement] = []
    for fact_id, new_fact in facts:
        plan = ask_placement(teacher, new_fact, view)
        view.add_fact(plan.parent_id, new_fact.text, embedding=new_fact.embedding, node_id=fact_id,
                      metadata=new_fact.metadata)
        actions: list[Action] = []
        for a in plan.bind(fact_id):
            if isinstance(a, Group) and a.aspect_id is None:
                a = Group(a.node_ids, a.label, a.metadata, f"aspect-{uuid.uuid4().hex}")
            try:
                apply_action(view, a, allow_aspects=True)
            except MembrainError as exc:
                raise TeacherError(f"stage-2 action {a!r} does not apply: {exc}") from None
            actions.append(a)
        out.append(Placement(plan.parent_id, plan.path, actions))
    return out


def safe_choice(teacher: Teacher, new_fact: NewFact, subtree: Subtree) -> int:
    """``teacher``'s stage-1 index, or 0 (attach here) when it raises or answers anything but
    a candidate's index: the answer of a teacher that must not break an insert (an LLM
    teacher's fallback, the offline stand-in)."""
    try:
        i = teacher.choose_stage1(new_fact, subtree)
    except Exception:  # noqa: BLE001 - any failure: attach here
        return 0
    ok = isinstance(i, (int, np.integer)) and not isinstance(i, bool) and 0 <= i < len(subtree.candidates)
    return int(i) if ok else 0


def safe_actions(teacher: Teacher, tree: MembrainTree, closure: Closure, *, allow_aspects: bool = False) -> list[Action]:
    """``teacher``'s stage-2 actions that hold on ``tree``, or none when it raises."""
    try:
        actions = list(teacher.choose_stage2(tree, closure))
    except Exception:  # noqa: BLE001 - any failure: Idle
        return []
    ok = []
    for a in actions:
        try:
            validate_action(tree, a, allow_aspects=allow_aspects)
        except Exception:  # noqa: BLE001 - an action that does not hold is left out
            continue
        ok.append(a)
    return ok


class BaseTeacher:
    """Convenience base: subclasses write the sync methods, async ones run in a thread."""

    name: str = "teacher"
    fast: bool = False  # answers in-process, without I/O (see the module docstring)
    names_topics: bool = True  # its aspect labels name topics (see the module docstring)

    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        raise NotImplementedError

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        raise NotImplementedError

    def name_aspect(self, fact_texts: list[str]) -> str:
        raise NotImplementedError

    def place(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        """The joint question (module docstring); see :func:`teacher_placement`."""
        return teacher_placement(self, new_fact, tree)

    async def aplace(self, new_fact: NewFact, tree: MembrainTree) -> Placement:
        return await asyncio.to_thread(self.place, new_fact, tree)

    async def achoose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return await asyncio.to_thread(self.choose_stage1, new_fact, subtree)

    async def achoose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return await asyncio.to_thread(self.choose_stage2, tree, closure)

    async def aname_aspect(self, fact_texts: list[str]) -> str:
        return await asyncio.to_thread(self.name_aspect, fact_texts)


_STOP = set("a an the of and or in on at to for with by from is are was were be been it its this that "
            "these those as has have had not no".split())


class LastResortTeacher(BaseTeacher):
    """Used when the fallback teacher is missing or fails: attach here, Idle, and the most
    frequent word of the facts as a label."""

    name = "last-resort"

    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return 0

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return []

    def name_aspect(self, fact_texts: list[str]) -> str:
        words = [w for t in fact_texts for w in re.findall(r"[A-Za-z][A-Za-z0-9-]+", t.lower()) if w not in _STOP]
        return Counter(words).most_common(1)[0][0] if words else "group"
