"""Batch questions: the inserts a student was unsure of wait, placed where the student put
them, until ``LearnerConfig.batch`` of them have gathered in a namespace; then one question
about all of them (the teacher's ``place_batch``) places and tidies them
(:meth:`~.pipeline.Learner.settle_batch`).

Definitions:

- the **waiting inserts** of a namespace are its inserts placed by the student while unsure
  (``PlaceRecord.batched``), oldest first;
- the **batch view** is a copy of the tree without the waiting facts: the tree the question
  is about. A waiting fact deleted or rewritten since its insert is left out of the
  question; of a key written twice, only the latest insert is asked about.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..errors import MembrainError
from ..tree.actions import Action
from ..tree.placement import Placement
from ..tree.tree import MembrainTree
from .records import PlaceRecord


class WaitingInserts:
    """The waiting inserts, per key (a namespace); thread-safe."""

    def __init__(self) -> None:
        self._by_key: dict[Any, list[PlaceRecord]] = {}
        self._lock = threading.Lock()

    def add(self, key: Any, rec: PlaceRecord, size: int) -> bool:
        """Queue ``rec`` under ``key``; whether ``size`` inserts now wait there."""
        with self._lock:
            batch = self._by_key.setdefault(key, [])
            batch.append(rec)
            return len(batch) >= size

    def take(self, key: Any) -> list[PlaceRecord]:
        """The inserts waiting under ``key``, removed from the queue."""
        with self._lock:
            return self._by_key.pop(key, [])

    def counts(self) -> dict[Any, int]:
        """Waiting inserts per key."""
        with self._lock:
            return {k: len(v) for k, v in self._by_key.items() if v}


def batch_view(tree: MembrainTree, records: list[PlaceRecord]) -> tuple[MembrainTree, list[PlaceRecord]]:
    """The batch view of ``tree`` and the records still waiting (see the module docstring)."""
    live: list[PlaceRecord] = []
    seen: set[str] = set()
    for r in reversed(records):
        if r.fact_id in tree and r.fact_id not in seen and tree.node(r.fact_id).text == r.new_fact.text:
            live.append(r)
            seen.add(r.fact_id)
    live.reverse()
    view = tree.copy()
    for r in live:
        view.remove(r.fact_id)
    return view, live


def carry_out(tree: MembrainTree, live: list[PlaceRecord], plans: list[Placement],
              rewrite: Callable[[MembrainTree, list[Action]], Any]) -> int:
    """Move each fact of an answered batch under its parent in ``tree`` and apply its
    actions with ``rewrite`` (which re-validates them: the tree may have changed since the
    question); returns the facts placed."""
    placed = 0
    for r, plan in zip(live, plans):
        try:
            if tree.parent(r.fact_id) != plan.parent_id and plan.parent_id in tree:
                tree.move(r.fact_id, plan.parent_id)
        except MembrainError:
            continue
        rewrite(tree, plan.bind(r.fact_id))
        placed += 1
    return placed


__all__ = ["WaitingInserts", "batch_view", "carry_out"]
