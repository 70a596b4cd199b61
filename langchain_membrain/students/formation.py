"""The formation student: the part of formation a small model can learn (formation.py).

A forming teacher answers two things about an input: *whether* it states anything worth a
fact or an experience, and *what* (the texts, which only the teacher writes). The student
learns the first from the teacher's answers: a logistic regression over the input's
embedding, class-balanced (most chat turns state nothing), refitted by Newton's method on a
window of the latest labels.

Definitions:

- its **prediction** is ``p``, the probability that the teacher would form nothing (raw
  only); it is **sure** when ``p >= sure`` (default 0.9);
- its **agreement** is measured before it ever decides: each time the teacher is asked, the
  student's prediction is recorded first, and a sure prediction that the teacher then
  contradicts counts against it;
- the **gate** opens when the last ``window_agree`` sure predictions agreed at least at
  ``min_agreement`` (0.95): from then on a sure input is stored raw only without asking,
  except a share ``audit`` (2%) still asked and compared, so agreement stays measured.

The student never writes text and never decides that an input states something: a doubtful
input, or one it thinks holds a fact, goes to the teacher.
"""

from __future__ import annotations

import random
import threading
from collections import deque
from typing import Any

import numpy as np


class FormationStudent:
    """Learns whether the teacher forms anything from an input (module docstring)."""

    def __init__(self, *, sure: float = 0.9, min_agreement: float = 0.95, window_agree: int = 50,
                 min_each: int = 20, window: int = 2048, refit_every: int = 32, l2: float = 1.0,
                 audit: float = 0.02, seed: int = 0):
        self.sure, self.min_agreement, self.audit = sure, min_agreement, audit
        self.min_each, self.refit_every, self.l2 = min_each, refit_every, l2
        self._rows: deque[tuple[np.ndarray, bool]] = deque(maxlen=window)
        self._agreed: deque[bool] = deque(maxlen=window_agree)
        self._w: np.ndarray | None = None
        self._since_fit = 0
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.counts = {"decisions": 0, "asked": 0, "student_decided": 0, "audited": 0, "compared": 0,
                       "agreed": 0}

    # ----------------------------------------------------------------- deciding
    def prob_raw_only(self, vec: np.ndarray) -> float | None:
        """The probability that the teacher forms nothing from ``vec``; None before the
        student has seen ``min_each`` labels of each class."""
        with self._lock:
            if self._w is None:
                return None
            z = float(self._w[:-1] @ vec + self._w[-1])
        return float(1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0))))

    def decides(self, p: float | None) -> bool:
        """Whether the student stores the input raw only without asking: sure, gate open,
        and not drawn for an audit. Counts the decision."""
        with self._lock:
            self.counts["decisions"] += 1
            if p is None or p < self.sure or not self._gate_open():
                return False
            if self._rng.random() < self.audit:
                self.counts["audited"] += 1
                return False
            self.counts["student_decided"] += 1
            return True

    def _gate_open(self) -> bool:
        return len(self._agreed) == self._agreed.maxlen and sum(self._agreed) >= self.min_agreement * len(self._agreed)

    # ----------------------------------------------------------------- learning
    def observe(self, vec: np.ndarray, formed_nothing: bool, p: float | None) -> None:
        """The teacher's answer for ``vec``; ``p``: the prediction made before asking."""
        with self._lock:
            self.counts["asked"] += 1
            if p is not None and p >= self.sure:
                self._agreed.append(formed_nothing)
                self.counts["compared"] += 1
                self.counts["agreed"] += int(formed_nothing)
            self._rows.append((np.asarray(vec, dtype=np.float64), formed_nothing))
            self._since_fit += 1
            if self._since_fit >= self.refit_every:
                self._fit()

    def _fit(self) -> None:
        """Class-balanced, L2-regularised logistic regression by a few Newton steps."""
        self._since_fit = 0
        y = np.array([float(lab) for _, lab in self._rows])
        n_pos, n_neg = y.sum(), len(y) - y.sum()
        if min(n_pos, n_neg) < self.min_each:
            return
        x = np.hstack([np.stack([v for v, _ in self._rows]), np.ones((len(y), 1))])
        weight = np.where(y > 0, len(y) / (2 * n_pos), len(y) / (2 * n_neg))
        w = np.zeros(x.shape[1]) if self._w is None else self._w.copy()
        reg = self.l2 * np.eye(x.shape[1])
        reg[-1, -1] = 0.0  # the bias is not shrunk
        for _ in range(4):
            p = 1.0 / (1.0 + np.exp(-np.clip(x @ w, -30.0, 30.0)))
            grad = x.T @ (weight * (p - y)) + reg @ w
            hess = (x * (weight * p * (1 - p))[:, None]).T @ x + reg
            w -= np.linalg.solve(hess, grad)
        self._w = w

    def stats(self) -> dict[str, Any]:
        """Decisions, questions, the share the student took alone and its agreement."""
        with self._lock:
            c: dict[str, Any] = dict(self.counts)
        c["student_share"] = c["student_decided"] / max(c["decisions"], 1)
        c["agreement"] = c["agreed"] / c["compared"] if c["compared"] else None
        return c
