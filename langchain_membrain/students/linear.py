"""The linear students: small, fast-learning reads of the networks' own features that decide
where a network is unsure, each behind its own gate, and stage 1's attach-here student, which
answers the rare "attach here" class for it (training.OnlineTrainer owns them;
learner.Learner asks them).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .calibration import Calibrator, agrees_at
from .features import ATTACH_HERE_COLUMNS, Stage1Features, Stage2Features, attach_here_row


def _sigmoid(z: Any) -> float:
    """The logistic function, its argument clipped so that exp cannot overflow."""
    return float(1.0 / (1.0 + np.exp(-np.clip(z, -30.0, 30.0))))


class LinearStage1:
    """Stage 1's second student: a conditional logit over the candidates' numeric features,
    ``logit_j = w . num_j`` (softmax over the candidates), trained by a few plain gradient
    steps on each label as it arrives.

    Why beside the network: the network learns in batches, through a deep encoder that
    starts from a prior taught by the offline rule, so a new teacher's rule (a topic
    teacher: "the aspect whose topic this is") takes it hundreds of labels to follow; a
    linear read of the same features follows it within tens. It decides only where the
    network is unsure (:meth:`Learner.descend_model`), and only when its own confidence,
    temperature-scaled with the gate's check (:class:`Calibrator`) on its prequential
    predictions, passes the gate. Its state is small (one weight per feature) and is
    checkpointed with the networks; priors do not carry it.
    """

    def __init__(self, n_features: int, *, lr: float = 0.5, steps: int = 3, window: int = 128,
                 gate: float | None = None):
        self.w = np.zeros(n_features)
        self.lr, self.steps = float(lr), int(steps)
        self.calib = Calibrator(window, gate=gate)
        self.labelled = 0

    @staticmethod
    def _rows(feats: Stage1Features) -> np.ndarray:
        return np.asarray(feats.num[1:1 + feats.n_candidates], np.float64)

    def logits(self, feats: Stage1Features) -> np.ndarray:
        return self._rows(feats) @ self.w

    def confidence(self, logits: np.ndarray) -> float:
        return float(self.calib.probs(logits).max())

    def observe(self, feats: Stage1Features, target: int, *, calibrate_every: int) -> None:
        """Score the label prequentially (a calibration row), then learn it. The weights are
        replaced, never changed in place, so a reader sees the old ones or the new ones."""
        x = self._rows(feats)
        if not 0 <= target < len(x):
            return
        w = self.w
        self.calib.add(x @ w, target)
        self.calib.maybe_fit(calibrate_every)
        for _ in range(self.steps):
            z = x @ w
            p = np.exp(z - z.max())
            p /= p.sum()
            w = w - self.lr * (x.T @ p - x[target])
        self.w = w
        self.labelled += 1

    def state(self) -> dict[str, Any]:
        return {"weights": [float(v) for v in self.w], "temperature": self.calib.temperature,
                "labelled": self.labelled}

    def load(self, state: Any) -> None:
        """Read :meth:`state` back; anything else (an older checkpoint has none) resets it."""
        try:
            w = np.asarray([float(v) for v in state["weights"]])
            temperature, labelled = float(state["temperature"]), int(state["labelled"])
        except Exception:  # noqa: BLE001 - absent or foreign: start afresh
            w, temperature, labelled = np.zeros_like(self.w), 1.0, 0
        if w.shape != self.w.shape or not np.all(np.isfinite(w)) or not temperature > 0:
            w, temperature, labelled = np.zeros_like(self.w), 1.0, 0
        self.w, self.calib.temperature, self.labelled = w, temperature, labelled
        self.calib.rows.clear()
        self.calib.fitted = labelled > 0


class LinearIdle:
    """Stage 2's second student: the probability that the teacher's whole series on a
    closure is empty (Idle), by a logistic read of the focal fact's numeric features, trained
    by a few gradient steps on each label as it arrives (for the reason :class:`LinearStage1`
    gives). It decides only where the network is unsure and proposes Idle too
    (:meth:`Learner.propose_stage2`): its gate (:meth:`_gate_opens`) is checked on its
    prequential predictions over a window, and then lets through a probability at or above
    the gate.
    """

    def __init__(self, n_features: int, *, lr: float = 0.3, steps: int = 3, window: int = 128,
                 gate: float | None = None):
        self.w = np.zeros(n_features + 1)  # the last weight is the bias
        self.lr, self.steps, self.gate = float(lr), int(steps), gate
        self.rows: deque[tuple[float, bool]] = deque(maxlen=window)
        self.open = False
        self.labelled = 0

    @staticmethod
    def _row(feats: Stage2Features) -> np.ndarray:
        return np.append(np.asarray(feats.num[int(feats.fact_tok[0])], np.float64), 1.0)

    def prob(self, feats: Stage2Features) -> float:
        return _sigmoid(self._row(feats) @ self.w)

    def sure(self, p: float) -> bool:
        return self.open and self.gate is not None and p >= self.gate

    def observe(self, feats: Stage2Features, idle: bool, *, gate_row: bool) -> None:
        """Learn a label; with ``gate_row`` (the teacher was not asked because stage 2 was
        unsure, so the label is a fair sample of what the gate lets through) score it
        prequentially first, as a row for the gate. The weights are replaced, never changed
        in place."""
        x, w = self._row(feats), self.w
        if gate_row:
            self.rows.append((_sigmoid(x @ w), bool(idle)))
        if gate_row:
            self.open = self._gate_opens()
        for _ in range(self.steps):
            w = w + self.lr * (float(idle) - _sigmoid(x @ w)) * x
        self.w = w
        self.labelled += 1

    def state(self) -> dict[str, Any]:
        return {"weights": [float(v) for v in self.w], "rows": [[p, y] for p, y in self.rows],
                "labelled": self.labelled}

    def load(self, state: Any) -> None:
        """Read :meth:`state` back; anything else (an older checkpoint has none) resets it."""
        try:
            w = np.asarray([float(v) for v in state["weights"]])
            rows = [(float(p), bool(y)) for p, y in state["rows"]]
            labelled = int(state["labelled"])
        except Exception:  # noqa: BLE001 - absent or foreign: start afresh
            w, rows, labelled = np.zeros_like(self.w), [], 0
        if w.shape != self.w.shape or not np.all(np.isfinite(w)):
            w, rows, labelled = np.zeros_like(self.w), [], 0
        self.w, self.labelled = w, labelled
        self.rows.clear()
        self.rows.extend(rows)
        self.open = self._gate_opens()

    def _gate_opens(self) -> bool:
        """Over the window's fair rows: the Idles it would take alone (probability at or above
        the gate) were right at the gate's rate, *and* the teacher's actions stayed below the
        gate at that rate too. The second half keeps a teacher's rare actions from passing as
        Idle behind a high Idle base rate (an offline rule that acts on 5% of inserts)."""
        if self.gate is None:
            return False
        passed = np.array([y for p, y in self.rows if p >= self.gate], bool)
        acted = np.array([p < self.gate for p, y in self.rows if not y], bool)
        return agrees_at(passed, self.gate) and agrees_at(acted, self.gate)


CLIP_SD = 4.0  # AttachHere reads standardised columns within this many standard deviations


class AttachHere:
    """Stage 1's attach-here student: whether the teacher attaches the new fact at the current
    node rather than descending into one of its child aspects, by a class-balanced logistic
    regression on :func:`features.attach_here_row`.

    Why beside the networks: a teacher that descends on 98% of its levels (the offline rule on
    WordNet's animals) gives the candidate softmax a handful of "attach here" labels, which it
    answers by descending, confidently. Balanced weights make the
    decision rule the one that errs as often on either class: ``balanced`` is the fit's
    probability, ``prob`` the same corrected back to the window's share of stops (the
    intercept shift that undoes the balancing), the probability the gate compares.

    The fit: Newton's method on the standardised rows of a window, L2-regularised, refitted
    every ``refit_every`` labels once the window holds ``min_each`` of either class.
    """

    def __init__(self, *, window: int = 2048, refit_every: int = 8, min_each: int = 5, l2: float = 1.0):
        self.rows: deque[tuple[np.ndarray, bool]] = deque(maxlen=window)
        self.refit_every, self.min_each, self.l2 = int(refit_every), int(min_each), float(l2)
        self.w: np.ndarray | None = None  # (weights on standardised columns + bias), or None: not fitted
        self.mu = np.zeros(len(ATTACH_HERE_COLUMNS))
        self.sd = np.ones(len(ATTACH_HERE_COLUMNS))
        self.log_prior_odds = 0.0
        self._since_fit = 0
        self.stops_proposed: deque[bool] = deque(maxlen=window)  # prequential: was each stop it proposed right

    @property
    def ready(self) -> bool:
        return self.w is not None

    def stops_agree_at(self, rate: float) -> bool:
        """Whether the stops it proposed (scored before it learnt each label) agreed with
        the teacher at ``rate`` (calibration.agrees_at): until they do, the rare class it is
        there for goes to the teacher."""
        return agrees_at(np.array(self.stops_proposed, bool), rate)

    def observe(self, feats: Stage1Features, stop: bool) -> None:
        """Learn one label of a level with child aspects (``stop``: the teacher attached here),
        scoring a stop it would have proposed first."""
        if self.ready and self.balanced(feats) >= 0.5:
            self.stops_proposed.append(bool(stop))
        self.rows.append((attach_here_row(feats), bool(stop)))
        self._since_fit += 1
        if self._since_fit >= self.refit_every:
            self.fit()

    def fit(self) -> None:
        self._since_fit = 0
        y = np.array([t for _, t in self.rows], bool)
        n_stop, n = int(y.sum()), len(y)
        if min(n_stop, n - n_stop) < self.min_each:
            return
        X = np.stack([x for x, _ in self.rows])
        mu, sd = X.mean(axis=0), X.std(axis=0)
        sd = np.where(sd > 1e-6, sd, 1.0)  # a constant column stays 0 (its weight has no gradient)
        Z = np.hstack([(X - mu) / sd, np.ones((n, 1))])
        weight = np.where(y, n / (2.0 * n_stop), n / (2.0 * (n - n_stop)))
        reg = self.l2 * np.eye(Z.shape[1])  # the bias too: separable rows must not send it to infinity

        def loss(w: np.ndarray) -> float:
            z = Z @ w
            return float(weight @ (np.logaddexp(0.0, z) - y * z) + 0.5 * w @ reg @ w)

        w = np.zeros(Z.shape[1])
        for _ in range(25):  # Newton's method with step halving (the loss is convex)
            p = 1.0 / (1.0 + np.exp(-np.clip(Z @ w, -30.0, 30.0)))
            grad = Z.T @ (weight * (p - y)) + reg @ w
            hess = Z.T @ (Z * (weight * p * (1.0 - p))[:, None]) + reg
            step, t, before = np.linalg.solve(hess, grad), 1.0, loss(w)
            while t > 1e-4 and loss(w - t * step) > before:
                t /= 2
            w = w - t * step
            if np.abs(t * step).max() < 1e-6:
                break
        if np.all(np.isfinite(w)):
            self.w, self.mu, self.sd = w, mu, sd
            self.log_prior_odds = float(np.log(n_stop / (n - n_stop)))

    def _logit(self, feats: Stage1Features) -> float:
        assert self.w is not None
        # Clipped: a level unlike any in the window (a child far larger than any seen) must not
        # get a certain answer by extrapolation.
        z = np.clip((attach_here_row(feats) - self.mu) / self.sd, -CLIP_SD, CLIP_SD)
        return float(z @ self.w[:-1] + self.w[-1])

    def balanced(self, feats: Stage1Features) -> float:
        return _sigmoid(self._logit(feats))

    def prob(self, feats: Stage1Features) -> float:
        return _sigmoid(self._logit(feats) + self.log_prior_odds)

    def state(self) -> dict[str, Any]:
        return {"rows": [[[float(v) for v in x], bool(t)] for x, t in self.rows],
                "stops_proposed": [bool(t) for t in self.stops_proposed]}

    def load(self, state: Any) -> None:
        """Read :meth:`state` back and refit; anything else (an older checkpoint has none) resets it."""
        self.rows.clear()
        self.w = None
        try:
            rows = [(np.asarray([float(v) for v in x]), bool(t)) for x, t in state["rows"]]
        except Exception:  # noqa: BLE001 - absent or foreign: start afresh
            rows = []
        width = len(ATTACH_HERE_COLUMNS)
        self.rows.extend((x, t) for x, t in rows if x.shape == (width,) and np.all(np.isfinite(x)))
        self.stops_proposed.clear()
        if self.rows:
            self.stops_proposed.extend(bool(t) for t in state.get("stops_proposed", []))
        self.fit()
