"""The linear students: small, fast-learning reads of the networks' own features that decide
where a network is unsure, each behind its own gate (training.OnlineTrainer owns them;
pipeline.Learner asks them).
"""

from __future__ import annotations

from collections import deque
from typing import Any

import numpy as np

from .calibration import Calibrator, agrees_at
from .features import Stage1Features, Stage2Features


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
