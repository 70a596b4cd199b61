"""Calibration of the students' gates: how sure a decision must look before it is taken
without the teacher.

- :func:`agrees_at`: whether decisions agreed with the teacher at a rate, by a one-sided
  lower bound (the check every gate makes).
- :class:`Calibrator`: temperature scaling of a softmax over candidates (stage 1, the
  operation student, the linear stage-1 student), lowered only as far as what the gate then
  passes stays right at the gate's rate.
- :class:`PlattCalibrator`: stage 2's confidence, a logistic fit of "the whole action
  series agreed" on the decision's score and size.
"""

from __future__ import annotations

import math
from collections import deque

import numpy as np

WILSON_Z = 1.645  # one-sided 95%


def agrees_at(right: np.ndarray, rate: float) -> bool:
    """Whether decisions with these outcomes (True: agreed with the teacher) agree at
    ``rate`` or more, by Wilson's one-sided 95% lower bound on their agreement (False for
    none): what a gate's calibration may let through (Calibrator)."""
    n = len(right)
    if n == 0:
        return False
    p, z = float(np.mean(right)), WILSON_Z
    low = (p + z * z / (2 * n) - z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))) / (1 + z * z / n)
    return low >= rate


class Calibrator:
    """Temperature scaling on a window of (logits, label) rows.

    ``gate``: the confidence a decision needs to be taken without the teacher. With it, the
    fitted temperature is lowered from the NLL fit as far as the rows the gate would then
    pass still agree with the teacher at that rate, by a one-sided 95% lower bound (Wilson's)
    on their agreement. Why: NLL weighs a few confident errors heavily (a new teacher that
    the student already matches on nearly every decision can get a temperature that keeps
    nearly every decision under the gate), while the gate needs only that what it lets
    through is right at its rate.
    The temperature is never raised above the NLL fit."""

    GRID = np.exp(np.linspace(math.log(0.2), math.log(10.0), 49))

    def __init__(self, window: int, gate: float | None = None):
        self.rows: deque[tuple[np.ndarray, int]] = deque(maxlen=window)
        self.temperature = 1.0
        self.gate = gate
        self.fitted = False  # whether the temperature was ever fitted (a loaded one counts)
        self._since_fit = 0

    def add(self, logits: np.ndarray, label: int) -> None:
        self.rows.append((np.asarray(logits, np.float64), int(label)))
        self._since_fit += 1

    MIN_ROWS = 32  # fewer rows fit a temperature to noise (the grid's ends: 0.2 or 10)

    def maybe_fit(self, every: int) -> None:
        if self._since_fit >= every and len(self.rows) >= self.MIN_ROWS:
            self.fit()

    def fit(self) -> float:
        """Set ``temperature``: the grid value with the lowest mean NLL, then (with a
        ``gate``) the lowest grid value below it down to which every temperature passes
        :func:`agrees_at` (vectorised: rows of different widths are padded with -inf, which
        adds nothing to the softmax)."""
        self._since_fit = 0
        width = max(len(r) for r, _ in self.rows)
        logits = np.full((len(self.rows), width), -np.inf)
        for i, (r, _) in enumerate(self.rows):
            logits[i, :len(r)] = r
        labels = np.array([y for _, y in self.rows])
        z = logits[None] / self.GRID[:, None, None]  # (grid, rows, width)
        zmax = z.max(axis=2, keepdims=True)
        lse = np.log(np.exp(z - zmax).sum(axis=2)) + zmax[..., 0]
        nll = (lse - z[:, np.arange(len(labels)), labels]).mean(axis=1)
        best = int(np.argmin(nll))
        if self.gate is not None:
            confidence = np.exp(zmax[..., 0] - lse)  # (grid, rows): the argmax's probability
            right = np.argmax(logits, axis=1) == labels
            while best > 0 and agrees_at(right[confidence[best - 1] >= self.gate], self.gate):
                best -= 1
        self.temperature = float(self.GRID[best])
        self.fitted = True
        return self.temperature

    def probs(self, logits: np.ndarray) -> np.ndarray:
        z = np.asarray(logits, np.float64) / self.temperature
        z = z - z.max(axis=-1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=-1, keepdims=True)


class PlattCalibrator:
    """Platt scaling of a stage-2 decision, extended by its size:
    ``P(right) = sigmoid(a * score + c * n + b)``, with ``score`` the decision's
    log-probability and ``n`` the number of facts it decided (those with more than one
    possible action). ``(a, c, b)`` maximise the likelihood of (score, n, agreed-with-the-
    teacher) rows over a window, plus Platt's own smoothing: the targets are
    ``(k + 1) / (k + 2)`` for the ``k`` rows that agreed and ``1 / (m + 2)`` for the ``m``
    that did not, so that a window where every decision agreed (or none did) does not send
    ``b`` to infinity. Newton's method with step halving, L2-regularised, bounded; ``a >= 0``
    (a more probable series is never *less* likely right) and ``c <= 0`` (nor is a larger
    one, at the same score).

    Why the size: a prior is fitted on closures of the sizes its streams had, and long
    chats grow larger ones. With the score alone the fit extrapolated to them with the
    same confidence, and let through wrong decisions on closures larger than any it was fitted
    on; with the size it lets fewer through, and those agree with the teacher more often.
    Fitted once the window holds MIN_ROWS rows; before, ``(a, c, b) = (1, 0, 0)``.

    Not fitted for its gate as :class:`Calibrator` is: raising ``b`` as far as the window's
    passing decisions agreed at 0.9 let a student trained from scratch go silent once its
    own decisions shaped the tree."""

    MIN_ROWS = 64
    BOUND = 50.0

    def __init__(self, window: int):
        self.rows: deque[tuple[float, float, int]] = deque(maxlen=window)
        self.w = (1.0, 0.0, 0.0)  # (a, c, b)
        self._since_fit = 0

    def add(self, score: float, n: float, right: bool) -> None:
        self.rows.append((float(score), float(n), int(bool(right))))
        self._since_fit += 1

    def maybe_fit(self, every: int) -> None:
        if self._since_fit >= every and len(self.rows) >= self.MIN_ROWS:
            self.fit()

    def fit(self) -> tuple[float, float, float]:
        self._since_fit = 0
        rows = np.array(self.rows, dtype=np.float64).reshape(-1, 3)
        right = rows[:, 2] > 0.5
        k, m = int(right.sum()), int((~right).sum())
        y = np.where(right, (k + 1) / (k + 2), 1 / (m + 2))
        X = np.stack([rows[:, 0], rows[:, 1], np.ones(len(rows))], axis=1)
        lam = 1e-2

        def loss(w: np.ndarray) -> float:
            z = X @ w
            return float(np.sum(np.logaddexp(0, z) - y * z) + 0.5 * lam * w @ w)

        lo, hi = np.array([0.0, -self.BOUND, -self.BOUND]), np.array([self.BOUND, 0.0, self.BOUND])
        w = np.array([1.0, 0.0, 0.0])
        for _ in range(50):
            p = 1.0 / (1.0 + np.exp(-np.clip(X @ w, -30, 30)))
            grad = X.T @ (p - y) + lam * w
            hess = X.T @ (X * (p * (1 - p))[:, None]) + lam * np.eye(3)
            step = np.linalg.solve(hess, grad)
            t, before = 1.0, loss(w)
            while t > 1e-4 and loss(np.clip(w - t * step, lo, hi)) > before:
                t /= 2
            new = np.clip(w - t * step, lo, hi)
            done = np.abs(new - w).max() < 1e-8
            w = new
            if done:
                break
        self.w = (float(w[0]), float(w[1]), float(w[2]))
        return self.w

    def prob(self, score: float, n: float) -> float:
        a, c, b = self.w
        return float(1.0 / (1.0 + np.exp(-np.clip(a * score + c * n + b, -30, 30))))

    def load(self, w: tuple[float, float, float], rows: list[tuple[float, float, int]]) -> None:
        """Continue from a stored fit and its window (a prior's or a checkpoint's): new
        rows then replace the stored ones one by one instead of starting from nothing."""
        self.w = (float(w[0]), float(w[1]), float(w[2]))
        self.rows.clear()
        self.rows.extend(rows[-self.rows.maxlen:] if self.rows.maxlen else rows)
        self._since_fit = 0
