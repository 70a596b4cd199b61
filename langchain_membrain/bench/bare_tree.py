"""One bare tree and a :class:`~langchain_membrain.insert.learner.Learner`, driven directly
through the insert graph: the benchmarks' and labs' way to insert embedded facts, so that
they measure the insert a user's memory runs (:func:`insert_fact`, :func:`place_fact`).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar, cast

import numpy as np

from ..errors import InvalidOperationError
from ..insert.graph import InsertGraph, InsertState
from ..insert.learner import Learner
from ..insert.records import Correction, PlaceRecord, SupervisionResult
from ..tree.actions import Action
from ..tree.inputs import Namespace
from ..tree.placement import NewFact
from ..tree.tree import MembrainTree

T = TypeVar("T")


@dataclass
class InsertResult:
    """The outcome of :func:`insert_fact`.

    ``stage1_by``/``stage2_by``: who decided ("model", "teacher", "forced" when there was
    no choice; for stage 1, "offline rule" when the teacher gave no answer before the model
    was warm: ``PlaceRecord.placed_by``). ``teacher_calls`` counts the teacher questions of
    this insert (0 or 1; the requests sent, retries included, with an LLM teacher).
    ``actions``: the stage-2 actions applied, corrections included.
    """

    fact_id: str
    parent_id: str
    placed_under: str
    stage1_by: str
    stage2_by: str
    teacher_calls: int
    teacher_failures: int
    actions: list[Action]
    corrections: list[Correction]
    record: PlaceRecord
    supervision: SupervisionResult
    naming_calls: int = 0


class OneTree:
    """One bare tree standing for every namespace; a write is a plain call (nothing to
    commit)."""

    __slots__ = ("bare", "_lock")

    def __init__(self, tree: MembrainTree):
        self.bare = tree
        self._lock = threading.RLock()

    def lock(self, ns: Namespace) -> threading.RLock:
        return self._lock

    def tree(self, ns: Namespace, *, create: bool) -> MembrainTree:
        return self.bare

    def mutate(self, ns: Namespace, write: Callable[[MembrainTree], T]) -> T:
        with self._lock:
            return write(self.bare)


class TreeHost:
    """The insert graph's host for one bare tree and a :class:`~.learner.Learner` driven
    directly (benchmarks, labs). Facts come embedded (:func:`insert_fact`). With
    ``supervise`` each insert is supervised and trained on before it returns, and the
    teacher's corrections applied (``LearnerConfig.apply_corrections``), as in a memory with
    ``background=False``; without, its record is left for the caller to supervise."""

    def __init__(self, tree: MembrainTree, learner: Learner, *, supervise: bool = True):
        self.forest = OneTree(tree)
        self.current = learner
        self.supervises = supervise
        self.record: PlaceRecord | None = None
        self.last: InsertResult | None = None

    def embed(self, texts: list[str]) -> np.ndarray:
        raise InvalidOperationError("a bare tree has no embedder: insert embedded facts (insert_fact)")

    @contextlib.contextmanager
    def learner(self, dim: int | None = None) -> Iterator[Learner]:
        yield self.current

    def placed(self, ns: Namespace, record: PlaceRecord) -> None:
        self.record = record
        if not self.supervises:
            return
        learner, tree = self.current, self.forest.bare
        sup = learner.supervise(record)
        extra = learner.apply_corrections(tree, sup) if learner.config.apply_corrections else []
        parent_id = tree.parent(record.fact_id)
        assert parent_id is not None  # a fact is never the root
        self.last = InsertResult(
            fact_id=record.fact_id, parent_id=parent_id, placed_under=record.placed_under,
            stage1_by=record.placed_by, stage2_by=record.stage2.by if record.stage2 is not None else "forced",
            teacher_calls=record.teacher_calls + sup.teacher_calls,
            teacher_failures=record.teacher_failures + sup.teacher_failures,
            actions=list(record.applied) + list(extra), corrections=sup.corrections, record=record,
            supervision=sup)

    def settle_batch(self, ns: Namespace, carrier: PlaceRecord | None = None) -> None:
        learner = self.current
        learner.settle_batch(self.forest.bare, learner.waiting.take(ns), carrier)


BARE_TREE: Namespace = ("tree",)  # the namespace key of a bare tree's inserts (waiting batches)


def _run_on_tree(host: TreeHost, new_fact: NewFact, node_id: str | None) -> None:
    pipeline = InsertGraph(host)
    pipeline.run(cast(InsertState, pipeline.start(BARE_TREE, new_fact, node_id)), start="stage1_descend")


def insert_fact(tree: MembrainTree, learner: Learner, new_fact: NewFact, *,
                node_id: str | None = None) -> InsertResult:
    """Insert an embedded fact into a bare tree through the insert graph (the nodes a
    memory's ``add`` runs, after its embed step), decided by ``learner``, and supervise it;
    ``node_id`` None: the tree names the fact."""
    host = TreeHost(tree, learner)
    named = learner.ledger.naming_calls
    _run_on_tree(host, new_fact, node_id)
    assert host.last is not None
    host.last.naming_calls = learner.ledger.naming_calls - named
    return host.last


def place_fact(tree: MembrainTree, learner: Learner, new_fact: NewFact, *,
               node_id: str | None = None) -> PlaceRecord:
    """The same insert, left unsupervised: its record, for the caller's
    :meth:`~.learner.Learner.supervise` (what a memory's background worker does later)."""
    host = TreeHost(tree, learner, supervise=False)
    _run_on_tree(host, new_fact, node_id)
    assert host.record is not None
    return host.record
