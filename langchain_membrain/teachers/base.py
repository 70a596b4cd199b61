"""The Teacher protocol: who decides, when the models are not trusted yet.

A teacher answers three questions:

- stage 1, ``choose_stage1(new_fact, subtree) -> int``: index into ``subtree.candidates``
  (0 is the current node, meaning "attach here"; any other index is a child aspect to
  descend into);
- stage 2, ``choose_stage2(tree, closure) -> list[Action]``: the action series for a closure
  (an empty list is all Idle);
- ``name_aspect(fact_texts) -> str``: a short label (1 to 4 words) for a new aspect.

A teacher may set ``fast = True`` when it answers in-process without I/O (the offline
teachers do). A memory's background worker asks any other teacher on a copy of the tree,
holding no lock, so that adds are never held up by its answers.

Each has an async twin (``a``-prefixed); :class:`BaseTeacher` runs the sync one in a
thread by default.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np

from ..actions import Action
from ..tree import Closure, MembrainTree


@dataclass
class NewFact:
    """A fact being inserted: its text, its embedding and the caller's metadata."""

    text: str
    embedding: np.ndarray
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class Subtree:
    """A two-layer subtree as a stage-1 decision sees it.

    ``candidates[0]`` is ``node_id`` (attach here); the rest are child aspects, possibly
    cut to the top-K most similar to the new fact.
    """

    tree: MembrainTree
    node_id: str
    candidates: list[str]


@runtime_checkable
class Teacher(Protocol):
    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int: ...

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]: ...

    def name_aspect(self, fact_texts: list[str]) -> str: ...

    async def achoose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int: ...

    async def achoose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]: ...

    async def aname_aspect(self, fact_texts: list[str]) -> str: ...


class BaseTeacher:
    """Convenience base: subclasses write the sync methods, async ones run in a thread."""

    name: str = "teacher"
    fast: bool = False  # answers in-process, without I/O (see the module docstring)

    def choose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        raise NotImplementedError

    def choose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        raise NotImplementedError

    def name_aspect(self, fact_texts: list[str]) -> str:
        raise NotImplementedError

    async def achoose_stage1(self, new_fact: NewFact, subtree: Subtree) -> int:
        return await asyncio.to_thread(self.choose_stage1, new_fact, subtree)

    async def achoose_stage2(self, tree: MembrainTree, closure: Closure) -> list[Action]:
        return await asyncio.to_thread(self.choose_stage2, tree, closure)

    async def aname_aspect(self, fact_texts: list[str]) -> str:
        return await asyncio.to_thread(self.name_aspect, fact_texts)
