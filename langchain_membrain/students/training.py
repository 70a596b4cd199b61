"""Online imitation of a teacher (README, Concepts): the trainer of the two placement networks.

The pieces:

- The settings (training_config.py): :class:`Policy`, *which* decision is executed
  (``execute``: the teacher's, the model's, or ``auto``: the model's when its calibrated
  confidence passes ``confidence``) and *when* the teacher is asked (``query``: always, only
  when the model is uncertain plus a random audit of ``audit_rate`` of the other decisions,
  or never); :class:`StageTraining` and :class:`TrainingConfig`, the optimisers' settings.
- Where the networks live (weights.py): the loaded weights in numpy until the first
  training, torch after.
- Calibration (calibration.py): stage 1's confidence is its temperature-scaled top
  probability, the temperature fitted on a window of *unbiasedly chosen* labelled decisions
  (teacher-forced, always-queried or randomly audited; never the ones asked *because* the
  model was unsure); stage 2's is a Platt fit, on the same kind of decisions, of whether a
  decision of its score and size agreed with the teacher exactly.
- The linear students (students.py), trained on every label as it arrives, decide where a
  network is unsure, behind their own gates.
- :class:`OnlineTrainer`: both networks, their optimisers, replay buffers and counters.
  Each teacher-labelled decision is first scored *prequentially* (the model's argmax
  before it has trained on that label), then queued. Once ``batch_size`` decisions are
  queued, the trainer takes ``steps_per_batch`` optimiser steps (models.optimiser_step),
  each on the queued decisions plus a sample of a bounded replay buffer (replay.py: so
  early decisions are not forgotten). The queued decisions form one padded batch, so this
  *is* gradient accumulation over ``batch_size`` decisions, computed in one forward pass.

The losses the steps minimise are in losses.py.

Checkpoints hold both networks, both optimisers, calibration and counters; they are read
by torchfile.read_checkpoint (``torch.load(weights_only=True)`` where torchfile cannot) and
validated completely before anything running is replaced, so a bad checkpoint raises
:class:`~.errors.CheckpointError` and changes nothing.

The operation student (operation_student.py) trains with the same replay buffer, optimiser
step, calibration and checkpoint container.
"""

from __future__ import annotations

import random
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import numpy as np

from ..errors import CheckpointError
from ..index.minilm import blas_threads
from . import torchfile
from .calibration import Calibrator, PlattCalibrator
from .decoding import Stage2Labels
from .features import S1, Stage1Features, Stage2Features
from .linear import AttachHere, LinearIdle, LinearStage1
from .nets import (
    ModelConfig,
    check_optimiser_state,
    parameter_shapes,
    stage1_logits,
    stage2_logits,
)
from .replay import ReplayBuffer, compact_stage1, compact_stage2
from .training_config import StageTraining, TrainingConfig
from .weights import TrainerNetworks, optimiser_groups

if TYPE_CHECKING:  # pragma: no cover - torch is imported where the networks are trained
    import torch

__all__ = [
    "CHECKPOINT_FORMAT", "DECISION_SCORE", "PRIOR_FORMAT", "OnlineTrainer", "StageCounters", "decided_facts",
]

CHECKPOINT_FORMAT = 1
PRIOR_FORMAT = 1
# Names the stage-2 decision score a stored Platt fit was made on. A checkpoint or prior
# without it (or with another) keeps its networks, but its fit is not applied: it was made
# on other scores (temperature-scaled, or without the size), and the calibrator starts from
# its default and refits from this teacher's audits.
DECISION_SCORE = "sum-log-top-softmax, facts decided"


@dataclass
class StageCounters:
    """Per-stage counts. ``agreed / labelled`` is the prequential agreement."""

    decisions: int = 0  # decisions taken (model or teacher), forced ones excluded
    model_executed: int = 0
    labelled: int = 0
    agreed: int = 0
    steps: int = 0
    loss: float = 0.0  # exponential moving average of the training loss
    train_ms: float = 0.0  # total time spent in optimiser steps

    @property
    def agreement(self) -> float:
        return self.agreed / self.labelled if self.labelled else 0.0


def _decision_fit(state: dict[str, Any]) -> tuple[tuple[float, float, float] | None, list]:
    """The stored stage-2 decision fit and its window, or (None, []) when it was made on
    another score (DECISION_SCORE): such a fit is left out, not misread."""
    if state.get("decision_score") != DECISION_SCORE:
        return None, []
    a, c, b = (float(v) for v in state["platt"])
    return (a, c, b), [(float(x), float(n), int(y)) for x, n, y in state.get("platt_rows", [])]


def decided_facts(type_mask: np.ndarray) -> int:
    """The facts a stage-2 decision decided: those with more than one possible action."""
    return int((np.asarray(type_mask).sum(axis=1) > 1).sum()) if len(type_mask) else 0


class OnlineTrainer:
    """Both networks, trained online from teacher labels.

    Thread-safe and double-buffered: the optimiser updates the training networks
    (``stage1``, ``stage2``) under ``lock``; predictions read separate inference copies
    (``infer1``, ``infer2``) under ``infer_lock``, refreshed by a parameter copy after each
    batch. A thread placing facts therefore never waits for an optimiser step, only for
    that copy (well under a millisecond for these sizes).

    torch is imported when the networks are first trained, not before: networks loaded from
    a checkpoint or a prior run in numpy (nets.py) until then, and such a checkpoint is
    written back without torch (torchfile.py), so a process that only places facts never
    imports it (importing torch, and ``torch._dynamo`` for the optimisers, would be most of
    ``membrain add``'s start-up). The torch objects
    (``stage1``, ``stage2``, ``infer1``, ``infer2``, ``opt1``, ``opt2``, ``device``) are
    built on first use, from the loaded state when there is one, else from a random
    initialisation seeded by ``config.seed`` (as they always were). Predictions then run
    through torch.
    """

    def __init__(self, model_config: ModelConfig, config: TrainingConfig | None = None):
        self.model_config = model_config
        self.config = config or TrainingConfig()
        self.rng = random.Random(self.config.seed)
        self.counters = {"stage1": StageCounters(), "stage2": StageCounters()}
        self.calib = {"stage1": Calibrator(self.config.calibration_window)}
        self.linear1 = LinearStage1(model_config.stage1_num, window=2 * self.config.calibration_window)
        self.idle2 = LinearIdle(model_config.stage2_num, window=2 * self.config.calibration_window)
        self.attach = AttachHere(window=8 * self.config.calibration_window)
        self.decision_calib = PlattCalibrator(self.config.calibration_window)
        self.pending1: list[tuple[Stage1Features, int]] = []
        self.pending2: list[tuple[Stage2Features, Stage2Labels]] = []
        self.replay1 = ReplayBuffer(self.config.stage1.replay_size)
        self.replay2 = ReplayBuffer(self.config.stage2.replay_size)
        self.lock = threading.RLock()
        self.infer_lock = threading.RLock()
        self.networks = TrainerNetworks(model_config, self.config, self.lock, self.infer_lock)
        # Labels a loaded prior was trained on, per stage, when the prior was taught by this
        # memory's own teacher: they count toward warm-up (not toward agreement or stats).
        self.prior_labels: dict[str, int] = {"stage1": 0, "stage2": 0}

    # --------------------------------------------------------------- torch half
    @property
    def torch_built(self) -> bool:
        """Whether the networks are in torch yet (see the class docstring)."""
        return self.networks.built

    stage1 = property(lambda self: self.networks.torch().stage1, doc="The stage-1 network being trained (torch).")
    stage2 = property(lambda self: self.networks.torch().stage2, doc="The stage-2 network being trained (torch).")
    infer1 = property(lambda self: self.networks.torch().infer1, doc="Stage 1's inference copy (torch).")
    infer2 = property(lambda self: self.networks.torch().infer2, doc="Stage 2's inference copy (torch).")
    opt1 = property(lambda self: self.networks.torch().opt1, doc="Stage 1's optimiser.")
    opt2 = property(lambda self: self.networks.torch().opt2, doc="Stage 2's optimiser.")
    device = property(lambda self: self.networks.torch().device, doc="The networks' torch device.")
    _traced = property(lambda self: self.networks.torch().traced)

    # ------------------------------------------------------------------ predict
    def predict_stage1(self, feats: Stage1Features) -> np.ndarray:
        """Logits over the candidates (length ``feats.n_candidates``)."""
        with self.infer_lock:
            weights = self.networks.numpy_weights("stage1")
            if weights is not None:
                with blas_threads(self.config.threads):
                    logits = stage1_logits(weights, self.model_config, feats)
                return logits[1:1 + feats.n_candidates].astype(np.float64)
        import torch

        from .models import collate_stage1, torch_threads

        t = self.networks.torch()  # before infer_lock: building takes lock, then infer_lock
        with self.infer_lock, torch.inference_mode(), torch_threads(self.config.threads):
            b = collate_stage1([feats], t.device)
            logits = self._inference("stage1", b)[0]
        return logits[1:1 + feats.n_candidates].double().cpu().numpy()

    def _inference(self, stage: str, b: dict[str, torch.Tensor]) -> Any:
        """Forward of an inference network. A TorchScript trace runs the same computation
        with less Python overhead per operation (stage 1: about 40% less latency on one CPU
        thread; stage 2: about 35%; the insert's hot path). Shapes (tokens, facts, aspects)
        are traced symbolically, so one trace serves every closure. It shares the eager
        network's parameters, so the parameter copies of ``_publish`` reach it. Tracing is
        lazy; a network that fails to trace runs eagerly from then on (held as None)."""
        nets = self.networks.torch()
        net = nets.infer1 if stage == "stage1" else nets.infer2
        if self.config.trace_inference and stage not in nets.traced:
            from .models import trace

            nets.traced[stage] = trace(net, (b,), strict=False)
        fast = nets.traced.get(stage)
        return net(b) if fast is None else fast(b)

    def predict_stage2(self, feats: Stage2Features) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(type (N, 4), demote (N, A), group (N, N)) logits."""
        with self.infer_lock:
            weights = self.networks.numpy_weights("stage2")
            if weights is not None:
                with blas_threads(self.config.threads):
                    types, demote, group = stage2_logits(weights, self.model_config, feats)
                    return types.astype(np.float64), demote.astype(np.float64), group.astype(np.float64)
        import torch

        from .models import collate_stage2, torch_threads

        nets = self.networks.torch()
        with self.infer_lock, torch.inference_mode(), torch_threads(self.config.threads):
            t, d, g = self._inference("stage2", collate_stage2([feats], nets.device))
        return t[0].double().cpu().numpy(), d[0].double().cpu().numpy(), g[0].double().cpu().numpy()

    def confidence_stage1(self, logits: np.ndarray) -> float:
        """Calibrated probability of the model's argmax."""
        return float(self.calib["stage1"].probs(logits).max())

    def stage2_score(self, type_logits: np.ndarray, type_mask: np.ndarray) -> float:
        """Log-probability of a closure decision's action types under independence:
        ``sum_i log p_i`` with ``p_i`` the top probability of fact ``i``'s action type under
        the network's softmax over its possible types (0 for no facts; floored at -30)."""
        if len(type_logits) == 0:
            return 0.0
        z = np.where(type_mask, type_logits, -np.inf)
        z = z - z.max(axis=1, keepdims=True)
        log_top = -np.log(np.exp(z).sum(axis=1))  # log of the top softmax probability
        return float(max(log_top.sum(), -30.0))

    def confidence_stage2(self, type_logits: np.ndarray, type_mask: np.ndarray) -> float:
        """Calibrated probability that a closure decision agrees with the teacher exactly:
        Platt scaling of :meth:`stage2_score` on the unbiased labelled decisions. (Per-fact
        probabilities are not calibrated one by one: a decision covers every fact of the
        closure and their errors are not independent; the decision-level fit says how
        often decisions of a given score were in fact right.)"""
        return self.decision_calib.prob(self.stage2_score(type_logits, type_mask), decided_facts(type_mask))

    # ------------------------------------------------------------------ observe
    def observe_stage1(self, feats: Stage1Features, target: int, model_logits: np.ndarray, *,
                       calibrate: bool) -> bool:
        """Record a teacher label: prequential agreement, calibration row, training queue.
        Returns whether the model's argmax agreed."""
        c = self.counters["stage1"]
        agreed = int(np.argmax(model_logits)) == int(target)
        with self.lock:
            c.labelled += 1
            c.agreed += agreed
            if calibrate:
                self.calib["stage1"].add(model_logits, target)
                self.calib["stage1"].maybe_fit(self.config.calibrate_every)
            self.pending1.append((feats, int(target)))
            self.linear1.observe(feats, int(target), calibrate_every=self.config.calibrate_every)
            if feats.num[:, S1["is_best_aff"]].any():  # a child aspect to go down into
                self.attach.observe(feats, int(target) == 0)
        return agreed

    def observe_stage2(self, feats: Stage2Features, labels: Stage2Labels, model_type_logits: np.ndarray,
                       agreed: bool, *, calibrate: bool, gate_sample: bool | None = None) -> None:
        """Record a teacher label (as :meth:`observe_stage1`). ``gate_sample``: whether it is a
        row for the linear Idle student's gate (default: ``calibrate``)."""
        c = self.counters["stage2"]
        with self.lock:
            c.labelled += 1
            c.agreed += bool(agreed)
            if calibrate:
                mask = feats.type_mask()
                self.decision_calib.add(self.stage2_score(model_type_logits, mask), decided_facts(mask), agreed)
                self.decision_calib.maybe_fit(self.config.calibrate_every)
            self.pending2.append((feats, labels))
            if len(feats.fact_tok):
                self.idle2.observe(feats, not labels.ignored and not np.any(labels.types),
                                   gate_row=calibrate if gate_sample is None else gate_sample)

    # ------------------------------------------------------------------ train
    def labelled_count(self, stage: str) -> int:
        """Labels seen, counting a trusted prior's (see :meth:`load_prior`)."""
        return self.counters[stage].labelled + self.prior_labels.get(stage, 0)

    def train_ready(self) -> int:
        """Train every stage whose queue holds a full batch; returns steps taken."""
        return self._train(full_only=True)

    def flush(self) -> int:
        """Train on whatever is queued, even a partial batch."""
        return self._train(full_only=False)

    def _train(self, *, full_only: bool) -> int:
        # The lock is taken per optimiser step, not for a whole batch, so that a thread
        # placing facts (predict_*) waits for at most one step while another one trains.
        steps = 0
        with self.lock:
            take1 = len(self.pending1) >= (self.config.stage1.batch_size if full_only else 1)
            take2 = len(self.pending2) >= (self.config.stage2.batch_size if full_only else 1)
            batch1, batch2 = (self.pending1 if take1 else []), (self.pending2 if take2 else [])
            if take1:
                self.pending1 = []
            if take2:
                self.pending2 = []
        if not (batch1 or batch2):
            return 0
        from .models import torch_threads

        self.networks.torch()  # torch from here on (the first training builds it)
        with torch_threads(self.config.threads):
            if batch1:
                steps += self._train1(batch1)
            if batch2:
                steps += self._train2(batch2)
        if steps:
            self.networks.publish()
        return steps

    def _batch(self, pending: list, replay: ReplayBuffer, st: StageTraining) -> list:
        return pending + replay.sample(st.replay_batch, self.rng)

    def _train1(self, pending: list) -> int:
        from .losses import stage1_loss

        st, c = self.config.stage1, self.counters["stage1"]
        t0 = time.perf_counter()
        for _ in range(st.steps_per_batch):
            with self.lock:
                self.stage1.train()
                loss = stage1_loss(self.stage1, self._batch(pending, self.replay1, st), self.device)
                self._step(self.opt1, self.stage1, loss)
                self.stage1.eval()
                c.loss = loss.item() if c.steps == 0 else 0.9 * c.loss + 0.1 * loss.item()
                c.steps += 1
        with self.lock:
            self.replay1.extend((compact_stage1(f), y) for f, y in pending)
            c.train_ms += (time.perf_counter() - t0) * 1000
        return st.steps_per_batch

    def stage2_loss(self, batch: list[tuple[Stage2Features, Stage2Labels]]) -> "torch.Tensor":
        """The stage-2 loss of a batch (losses.stage2_loss) under this trainer's weights."""
        from .losses import stage2_loss

        return stage2_loss(self.stage2, batch, self.config, self.device)

    def _train2(self, pending: list) -> int:
        st, c = self.config.stage2, self.counters["stage2"]
        t0 = time.perf_counter()
        for _ in range(st.steps_per_batch):
            with self.lock:
                self.stage2.train()
                loss = self.stage2_loss(self._batch(pending, self.replay2, st))
                self._step(self.opt2, self.stage2, loss)
                self.stage2.eval()
                c.loss = loss.item() if c.steps == 0 else 0.9 * c.loss + 0.1 * loss.item()
                c.steps += 1
        with self.lock:
            self.replay2.extend((compact_stage2(f), lab) for f, lab in pending)
            c.train_ms += (time.perf_counter() - t0) * 1000
        return st.steps_per_batch

    def _step(self, opt: "torch.optim.Optimizer", net: "torch.nn.Module", loss: "torch.Tensor") -> None:
        from .models import optimiser_step

        optimiser_step(opt, net.parameters(), loss, self.config.grad_clip)

    # ------------------------------------------------------------- checkpoints
    def _calibration_state(self) -> dict[str, Any]:
        """Calibration as checkpoints and priors store it (read back by ``_decision_fit``)."""
        return {
            "temperature": {k: v.temperature for k, v in self.calib.items()},
            "platt": list(self.decision_calib.w),
            "platt_rows": [list(r) for r in self.decision_calib.rows],
            "decision_score": DECISION_SCORE,
        }

    def _checkpoint_extras(self) -> dict[str, Any]:
        """What a checkpoint holds beyond a prior's state: the linear students."""
        return {"linear1": self.linear1.state(), "idle2": self.idle2.state(), "attach": self.attach.state()}

    def _checkpoint(self, networks: tuple[Any, Any], optimisers: tuple[Any, Any]) -> dict[str, Any]:
        """A checkpoint's state holding these states of the two networks and their
        optimisers (torch's, or the loaded numpy ones), with the counters and calibration."""
        return {
            "format": CHECKPOINT_FORMAT,
            "model_config": self.model_config.to_dict(),
            "stage1": networks[0],
            "stage2": networks[1],
            "opt1": optimisers[0],
            "opt2": optimisers[1],
            "counters": {k: asdict(v) for k, v in self.counters.items()},
            **self._calibration_state(),
            **self._checkpoint_extras(),
            "prior_labels": dict(self.prior_labels),
        }

    def state_dict(self) -> dict[str, Any]:
        with self.lock:
            return self._checkpoint((self.stage1.state_dict(), self.stage2.state_dict()),
                                    (self.opt1.state_dict(), self.opt2.state_dict()))

    def prior_state(self) -> dict[str, Any]:
        """What a shipped prior holds: both networks, calibration and label counts (no
        optimiser state, no counters but the labels)."""
        with self.lock:
            return {
                "format": PRIOR_FORMAT,
                "model_config": self.model_config.to_dict(),
                "stage1": self.stage1.state_dict(),
                "stage2": self.stage2.state_dict(),
                **self._calibration_state(),
                "labelled": {k: c.labelled for k, c in self.counters.items()},
            }

    def load_prior(self, state: dict[str, Any], *, trusted: bool) -> None:
        """Start from a prior's networks (:meth:`prior_state`; its tensors may be numpy
        arrays, as prior.load_prior reads them). ``trusted``: the prior was taught by the
        teacher this trainer imitates, so its calibration is kept and its labels count
        toward warm-up; otherwise calibration starts afresh and the gates stay closed until
        this teacher's own labels arrive. Raises CheckpointError (and changes nothing) when
        the prior does not fit."""
        if not isinstance(state, dict) or state.get("format") != PRIOR_FORMAT:
            raise CheckpointError("not a membrain prior (unknown format)")
        if state.get("model_config") != self.model_config.to_dict():
            raise CheckpointError("the prior was trained for other model dimensions")
        # Fine-tuning rates; a checkpoint saved later keeps them (its optimiser state).
        scale = self.config.prior_lr_scale
        try:
            temps = {"stage1": float(state["temperature"]["stage1"])}
            platt, rows = _decision_fit(state)
            labelled = {k: int(state["labelled"][k]) for k in ("stage1", "stage2")}
            if not self.networks.built:  # numpy until the first training (see the class docstring)
                weights = {k: self.networks.checked(state[k], k) for k in ("stage1", "stage2")}
                nets = None
            else:
                nets = self.networks.torch_copy(state["stage1"], state["stage2"], None, scale)
        except Exception as exc:
            raise CheckpointError(f"the prior does not fit the model: {exc}") from None
        with self.lock, self.infer_lock:
            if nets is None:
                self.networks.install_numpy(weights, None, scale)
            else:
                self.networks.install_torch(nets)
            if trusted:
                for k, t in temps.items():
                    self.calib[k].temperature = t
                if platt is not None:
                    self.decision_calib.load(platt, rows)
                self.prior_labels = labelled

    def save(self, path_or_buffer: str | Path | IO[bytes]) -> None:
        """Write a checkpoint to a path or a binary file object."""
        data = self.state_bytes()
        if isinstance(path_or_buffer, (str, Path)):
            Path(path_or_buffer).write_bytes(data)
        else:
            path_or_buffer.write(data)

    def state_bytes(self) -> bytes:
        """The checkpoint as bytes (for storing in a database): written without torch while
        the networks are still the ones loaded (they have not trained here), else by
        ``torch.save`` of :meth:`state_dict`."""
        with self.lock:
            loaded = self.networks.loaded()
            if loaded is not None:  # untrained here: no torch (and no optimiser built for the checkpoint)
                weights, opt_states, scale = loaded
                state = self._checkpoint((weights["stage1"], weights["stage2"]), opt_states or (None, None))
                if opt_states is None:
                    state["lr_scale"] = scale
                return torchfile.write_checkpoint(state, tensors=False)
            return torchfile.write_checkpoint(self.state_dict(), tensors=True)

    def load_bytes(self, data: bytes) -> None:
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise CheckpointError(f"checkpoint bytes expected, got {type(data).__name__}")
        self._load(bytes(data))

    def load(self, path_or_buffer: str | Path | IO[bytes]) -> None:
        """Replace networks, optimisers, calibration and counters by a checkpoint's.

        Everything is loaded into fresh objects and checked first; the running trainer is
        only touched once all of it succeeded. Raises CheckpointError otherwise.
        """
        try:
            if isinstance(path_or_buffer, (str, Path)):
                data = Path(path_or_buffer).read_bytes()
            else:
                data = path_or_buffer.read()
        except Exception as exc:
            raise CheckpointError(f"cannot read checkpoint: {exc}") from None
        self._load(bytes(data))

    def _load(self, data: bytes) -> None:
        # Read without torch (torchfile) unless torch holds the networks already; a file
        # torchfile does not understand is read by torch.
        try:
            state = torchfile.read_checkpoint(data, torch_first=self.networks.built)
        except Exception as exc:  # torch raises many types for corrupt or foreign files
            raise CheckpointError(f"cannot read checkpoint: {exc}") from None
        if not isinstance(state, dict) or state.get("format") != CHECKPOINT_FORMAT:
            raise CheckpointError("not a membrain checkpoint (unknown format)")
        mine = self.model_config.to_dict()
        theirs = state.get("model_config")
        if not isinstance(theirs, dict):
            raise CheckpointError("checkpoint has no model configuration")
        diffs = {k: (theirs.get(k), v) for k, v in mine.items()
                 if k not in ("dropout", "top_k", "max_context_facts", "max_closure_facts") and theirs.get(k) != v}
        if diffs:
            detail = ", ".join(f"{k}: checkpoint {a}, model {b}" for k, (a, b) in diffs.items())
            raise CheckpointError(f"checkpoint has other dimensions ({detail})")
        try:
            # No optimiser state: saved before any training here (fresh optimisers at lr_scale).
            fresh = state["opt1"] is None and state["opt2"] is None
            scale = float(state.get("lr_scale", 1.0)) if fresh else 1.0
            if not self.networks.built:  # numpy until the first training
                weights = {k: self.networks.checked(state[k], k) for k in ("stage1", "stage2")}
                opt_states = None if fresh else (torchfile.as_numpy(state["opt1"]), torchfile.as_numpy(state["opt2"]))
                for opt_state, stage in zip(opt_states or (), ("stage1", "stage2")):
                    check_optimiser_state(opt_state, optimiser_groups(parameter_shapes(self.model_config, stage)))
                nets = None
            else:
                nets = self.networks.torch_copy(state["stage1"], state["stage2"],
                                                None if fresh else (state["opt1"], state["opt2"]), scale)
            known = StageCounters.__dataclass_fields__
            counters = {k: StageCounters(**{f: v for f, v in state["counters"][k].items() if f in known})
                        for k in ("stage1", "stage2")}
            temps = {"stage1": float(state["temperature"]["stage1"])}
            platt, rows = _decision_fit(state)
        except Exception as exc:
            raise CheckpointError(f"checkpoint does not fit the model: {exc}") from None
        with self.lock, self.infer_lock:
            if nets is None:
                self.networks.install_numpy(weights, opt_states, scale)
            else:
                self.networks.install_torch(nets)  # re-traced on the new networks at the next prediction
            self.counters = counters
            for k, t in temps.items():
                self.calib[k].temperature = t
            if platt is not None:
                self.decision_calib.load(platt, rows)
            self.prior_labels = {k: int(v) for k, v in state.get("prior_labels", {}).items()}
            self.linear1.load(state.get("linear1"))
            self.idle2.load(state.get("idle2"))
            self.attach.load(state.get("attach"))
            self.pending1, self.pending2 = [], []
