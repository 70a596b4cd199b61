"""Replay: the labelled examples a network keeps after training on them, so that the
optimiser steps of later batches still see early labels (not forgotten when the teacher's
answers drift to other kinds of item).

- :class:`ReplayBuffer`: the latest ``size`` examples, sampled without replacement beside
  each new batch. Both trainers use it: the placement stages (training.OnlineTrainer) and
  the operation student (operation_student.OperationStudent).
- :func:`compact_stage1`, :func:`compact_stage2`: the copy of a placement decision's
  features that replay holds, its embeddings in float16 (half the memory).
"""

from __future__ import annotations

import random
from collections import deque
from typing import Any, Iterable

import numpy as np

from .features import Stage1Features, Stage2Features


class ReplayBuffer:
    """The latest ``size`` examples trained on, oldest dropped first.

    :meth:`sample` draws from them with the caller's generator: ``random.Random`` (the
    placement stages, one generator over both stages' buffers) or a numpy ``Generator``
    (the operation student). Each keeps the draws its seed always gave, so a run's numbers
    do not depend on which trainer shares this class."""

    def __init__(self, size: int):
        self.items: deque[Any] = deque(maxlen=int(size))

    def __len__(self) -> int:
        return len(self.items)

    def extend(self, examples: Iterable[Any]) -> None:
        self.items.extend(examples)

    def sample(self, k: int, rng: random.Random | np.random.Generator) -> list[Any]:
        """``min(k, len(self))`` distinct examples drawn by ``rng``: ``rng.sample`` for a
        ``random.Random``, ``rng.choice(..., replace=False)`` for a numpy Generator (nothing
        drawn when there is nothing to sample)."""
        k = min(int(k), len(self.items))
        if k == 0:
            return []
        if isinstance(rng, np.random.Generator):
            return [self.items[i] for i in rng.choice(len(self.items), k, replace=False)]
        return rng.sample(list(self.items), k)


def _half(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16)


def compact_stage1(f: Stage1Features) -> Stage1Features:
    """A replay copy of stage-1 features with the embeddings stored in float16."""
    return Stage1Features(_half(f.label), _half(f.mean), f.kind, f.role, f.num, f.n_candidates)


def compact_stage2(f: Stage2Features) -> Stage2Features:
    """A replay copy of stage-2 features with the embeddings stored in float16."""
    return Stage2Features(_half(f.label), _half(f.mean), f.kind, f.role, f.num, f.node_ids, f.fact_tok,
                          f.aspect_tok, f.demote_pair, f.group_pair, f.focal_id, f.parent_id, f.grandparent_id,
                          f.can_group)
