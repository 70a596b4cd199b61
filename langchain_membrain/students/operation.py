"""The operation student: the small network that learns the teacher's memory operations
online (README, Memories that change), and decides alone behind its gate.

- :func:`item_flags`: the lexical facts about an item it reads beside its embedding.
- :class:`OperationStudent`: encoding of a question, the gate, online training and its
  checkpoint (``state_bytes`` / ``load_bytes``).

It trains with the pieces the placement stages' trainer (training.OnlineTrainer) trains
with: the replay buffer (replay.ReplayBuffer), the optimiser step with its gradient clip
(models.optimiser_step), the temperature calibration (calibration.Calibrator), the
TorchScript trace of single-item inference (models.trace) and the checkpoint container
(torchfile.read_checkpoint / write_checkpoint, the optimiser state checked by
nets.check_optimiser_state). What stays its own, and why: its optimiser is Adam with L2
weight decay over one parameter group, the stages' AdamW (decoupled decay: another update
rule, so the same settings would train other weights) with a second group for their skip
heads, which this network has none of; its replay is sampled by the numpy generator of its
audit draws, the stages' by ``random.Random`` (each keeps the draws of its seed); and its
gate also needs a recent-agreement window (:meth:`OperationStudent.gate_open`).
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

import numpy as np

from ..teachers.operation_rule import (
    CHANGE_CUES,
    conservative_operation,
    is_question,
    is_small_talk,
    lower_words,
    states_something,
)
from ..tree.operation_types import ADD, IGNORE, Operation, OperationQuestion
from . import torchfile  # checkpoints read and written without torch
from .calibration import Calibrator
from .replay import ReplayBuffer
from .training_config import Policy

RETRACTION_CUES = frozenset("forget scratch ignore cancel cancelled off never died sold gave gone".split())


def item_flags(text: str) -> np.ndarray:
    """Cheap lexical facts about an item the student reads beside its embedding: question,
    small talk, whether it states anything at all (:func:`states_something`: not every
    sentence a question or small talk), a change cue, a retraction cue, and its length
    (words / 20, capped at 2). Any teacher ignores items that state nothing more often than
    others; the embedding alone blurs "Thanks! Where do I live?" with "I live in Leeds"."""
    words = set(lower_words(text))
    return np.array([float(is_question(text)), float(is_small_talk(text)), float(states_something(text)),
                     float(bool(words & CHANGE_CUES)), float(bool(words & RETRACTION_CUES)),
                     min(len(lower_words(text)) / 20.0, 2.0)], np.float32)


N_FLAGS = 6  # len(item_flags(...))

def may_correct(q: OperationQuestion) -> bool:
    """Whether the item may correct an existing fact: the offline rule would read it as
    superseding one of its candidates (:func:`~.operation_rule.conservative_operation`
    answers UPDATE). The student never decides such an item alone: UPDATE is its teacher's
    rare answer, the one a confident student gets wrong (a user then sees the stale fact
    first), so the teacher is asked."""
    return bool(q.candidates) and conservative_operation(q).kind == "UPDATE"


N_PAIR = 5  # per candidate: cosine, gap to the nearest, margin over the best other, rank, present


class _StudentNet:
    """The operation network (models.OperationNet). Weights loaded from a checkpoint or the
    prior run in numpy (nets.operation_logits: the same logits, to float32 rounding) until
    the network is first trained; torch is imported then, or at its first use for a random
    initialisation. In torch, single items run through a TorchScript trace: the trace
    shares the network's parameters, so training reaches it, and it cuts the Python overhead
    of the insert's hot path (models.trace, as the stages' inference)."""

    def __init__(self, dim: int, k: int, hidden: int = 64, seed: int = 0, weights: Any = None):
        self.k, self.dim, self.hidden, self.seed = k, dim, hidden, seed
        self.weights = weights  # the loaded state dict (numpy) while the network is not in torch
        self._network: Any = None
        self._traced: Any = None  # None: not yet traced; False: failed, run eagerly

    @property
    def built(self) -> bool:
        """Whether the network is in torch yet."""
        return self._network is not None

    @property
    def torch(self) -> Any:
        import torch

        return torch

    @property
    def network(self) -> Any:
        """The torch module, built on first use (from ``weights`` when loaded, else a random
        initialisation seeded by ``seed``)."""
        if self._network is None:
            import torch

            from .models import OperationNet
            torch.manual_seed(self.seed)
            network = OperationNet(self.dim, self.k, N_FLAGS, N_PAIR, self.hidden)
            if self.weights is not None:
                network.load_state_dict(torchfile.as_tensors(self.weights))
            self._network, self.weights = network, None
        return self._network

    @property
    def params(self) -> list:
        return list(self.network.parameters())

    def _tensors(self, batch: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]) -> list:
        # from_numpy wraps the stacked arrays without a second copy (the insert's hot path).
        return [self.torch.from_numpy(np.stack([b[i] for b in batch]).astype(np.float32, copy=False))
                for i in range(4)]

    def logits(self, batch: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]]):
        """Logits (B, 2 + 3k), masked with -inf where a candidate is missing (training)."""
        return self.network(*self._tensors(batch))

    def infer(self, row: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
        """One item's logits, without autograd: in numpy while the loaded weights are not
        in torch, else through the trace where it could be made."""
        if self._network is None and self.weights is not None:
            from ..index.minilm import blas_threads
            from .nets import operation_logits

            with blas_threads(1):
                return operation_logits(self.weights, *row).astype(np.float64)
        torch = self.torch
        args = self._tensors([row])
        self.network  # noqa: B018 - built outside inference mode (its parameters must train)
        with torch.inference_mode():
            if self._traced is None:
                from .models import trace

                traced = trace(self.network, tuple(args))
                self._traced = False if traced is None else traced  # False: run eagerly
            out = (self.network if self._traced is False else self._traced)(*args)
        return out[0].numpy().astype(np.float64)


class OperationStudent:
    """The small network that learns the teacher's operations online (README, Memories
    that change), with the stages' gate: it decides alone once it has seen ``policy.warmup``
    labels and its temperature-calibrated probability (calibration.Calibrator) of its answer is
    at least ``policy.confidence``; a share ``policy.audit_rate`` of those decisions still
    goes to the teacher so agreement stays measured. Trained with cross-entropy on every
    teacher answer, in batches of ``batch`` labels plus a replay sample.

    ``prior``: called once, when the network is first needed, for the shipped prior
    (prior.py) as ``(state bytes, trusted)``, or None. A trusted prior (taught by the teacher
    this student learns from) keeps its calibration, label count and recent agreement, so the
    gate may be open from the first item; an untrusted one gives only its weights, and the
    gate stays closed until this teacher's own answers open it."""

    def __init__(self, k: int = 5, *, policy: Policy | None = None, batch: int = 8, steps: int = 8, lr: float = 1e-2,
                 replay: int = 512, window: int = 64, seed: int = 0, threads: int | None = 1,
                 prior: Callable[[], tuple[bytes, bool] | None] | None = None):
        self.k = int(k)
        self.policy = policy or Policy(confidence=0.9, audit_rate=0.02, warmup=48)
        self.batch, self.steps, self.lr, self.replay_size = int(batch), int(steps), float(lr), int(replay)
        self.calibrator = Calibrator(128)
        self.net: _StudentNet | None = None
        self._opt: Any = None  # torch's Adam, made when the network first trains (it imports torch._dynamo)
        self._opt_state: Any = None  # the loaded optimiser state (numpy) until then
        self._pending: list = []
        self._replay = ReplayBuffer(self.replay_size)
        self._rng = np.random.default_rng(seed)
        self.seed = seed
        self.threads = threads  # CPU threads of the network's forwards and steps (models.torch_threads)
        self.labelled = 0
        self.agreed = 0
        self._recent: deque[int] = deque(maxlen=int(window))  # 1 = agreed, over recent labels
        self.optimiser_steps = 0
        self._lock = threading.RLock()
        self._prior = prior
        self.prior_used: str | None = None  # "trusted", "weights only" or None (stats())

    # -- encoding
    def encode(self, q: OperationQuestion) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
        if q.embedding is None:
            return None
        e = np.asarray(q.embedding, np.float32)
        dim = e.size
        cands = np.zeros((self.k, dim), np.float32)
        num = np.zeros((self.k, N_PAIR), np.float32)
        shown = q.candidates[: self.k]
        sims = [c.similarity for c in shown]
        top = sims[0] if sims else 0.0
        for i, c in enumerate(shown):
            if c.embedding is None:
                continue
            # how clearly this candidate is *the* old fact the item is about: its lead over
            # the best other candidate (-1 when it is the only one, as a cosine's floor)
            best_other = max((s for j, s in enumerate(sims) if j != i), default=-1.0)
            cands[i] = c.embedding
            num[i] = (c.similarity, top - c.similarity, c.similarity - best_other, i / self.k, 1.0)
        return e, item_flags(q.text), cands, num

    def label_index(self, q: OperationQuestion, op: Operation) -> int | None:
        if op.kind == "ADD":
            return 0
        if op.kind == "IGNORE":
            return 1
        keys = [c.key for c in q.candidates[: self.k]]
        if op.target not in keys:
            return None
        j = keys.index(op.target)
        offset = 2 if op.kind == "UPDATE" else (2 + self.k if op.keep else 2 + 2 * self.k)
        return offset + j

    def operation_of(self, q: OperationQuestion, index: int) -> Operation:
        if index == 0:
            return ADD
        if index == 1:
            return IGNORE
        j = (index - 2) % self.k
        kind = (index - 2) // self.k
        key = q.candidates[j].key
        return Operation("UPDATE", key) if kind == 0 else Operation("DELETE", key, keep=kind == 1)

    def _ensure(self, dim: int) -> _StudentNet:
        if self.net is None and self._prior is not None:
            found, self._prior = self._prior(), None
            if found is not None:
                self._start_from_prior(*found, dim=dim)
        if self.net is None:
            self.net = _StudentNet(dim, self.k, seed=self.seed)  # a random initialisation, in torch
        return self.net

    def _optimiser(self) -> Any:
        """Adam over the network (built here, with the loaded state when there is one)."""
        if self._opt is None:
            import torch

            assert self.net is not None  # after _ensure (_train) or under state_bytes' check
            opt = torch.optim.Adam(self.net.params, lr=self.lr, weight_decay=1e-4)
            if self._opt_state is not None:
                opt.load_state_dict(torchfile.as_tensors(self._opt_state))
            self._opt, self._opt_state = opt, None
        return self._opt

    # -- deciding
    def propose(self, q: OperationQuestion) -> tuple[Operation | None, bool]:
        """(the student's operation, whether the gate lets it decide alone: never an
        UPDATE or DELETE, which name a fact to retire, nor an item that :func:`may_correct`
        a fact)."""
        row = self.encode(q)
        if row is None:
            return None, False
        with self._lock:
            net = self._ensure(row[0].size)
            if net.built or net.weights is None:
                from .models import torch_threads  # torch is imported lazily in this module

                with torch_threads(self.threads):
                    logits = net.infer(row)
            else:
                logits = net.infer(row)  # numpy (see _StudentNet)
            self._last_logits = logits
            probs = self.calibrator.probs(logits)
            best = int(np.argmax(probs))
            proposed = self.operation_of(q, best)
            alone = (self.gate_open() and probs[best] >= self.policy.confidence and proposed.target is None
                     and not may_correct(q))
            return proposed, alone

    def gate_open(self) -> bool:
        """Whether the student may decide alone at all: after ``policy.warmup`` labels, and
        while its agreement with the teacher over the recent window is at least
        ``policy.confidence`` (a calibrated probability alone can be fitted to a run of
        easy, majority-class answers)."""
        recent = self._recent
        return (self.labelled >= self.policy.warmup and len(recent) == recent.maxlen
                and sum(recent) / len(recent) >= self.policy.confidence)

    def audit_due(self) -> bool:
        return bool(self._rng.random() < self.policy.audit_rate)

    # -- learning
    def learn(self, q: OperationQuestion, op: Operation, proposed: Operation | None, *,
              unbiased: bool = True) -> None:
        """Learn the teacher's answer ``op`` to ``q`` (``proposed``: the student's own).
        Every label trains the network; only an ``unbiased`` one (asked whatever the
        student's confidence: warm-up, a closed gate, an audit, teacher forcing) joins the
        agreement window and the calibration, as the stages' calibration does: the items
        asked because the student was unsure are its hardest, and counting them would
        measure its agreement on those alone and shut the gate on a student that decides
        the rest well."""
        row = self.encode(q)
        label = self.label_index(q, op)
        if row is None or label is None:
            return
        with self._lock:
            self._ensure(row[0].size)
            self.labelled += 1
            self.agreed += int(proposed == op)
            if proposed is not None and unbiased:
                self._recent.append(int(proposed == op))
                self.calibrator.add(self._last_logits, label)
                self.calibrator.maybe_fit(16)
            self._pending.append((row, label))
            if len(self._pending) >= self.batch:
                from .models import torch_threads  # training: torch from here on

                with torch_threads(self.threads):
                    self._train()

    REPLAY_BATCH = 32  # replayed labels beside each step's new ones
    GRAD_CLIP = 1.0

    def _train(self) -> None:
        """``steps`` optimiser steps, each on the pending labels plus a replay sample. The
        pending labels join the replay buffer first (the stages' join it after their
        steps): a step may see a new label twice, as this student always trained."""
        from .models import optimiser_step

        assert self.net is not None  # learn calls _ensure first
        torch = self.net.torch
        opt = self._optimiser()
        data, self._pending = self._pending, []
        self._replay.extend(data)
        for _ in range(self.steps):
            batch = data + self._replay.sample(self.REPLAY_BATCH, self._rng)
            logits = self.net.logits([b[0] for b in batch])
            target = torch.tensor([b[1] for b in batch])
            loss = torch.nn.functional.cross_entropy(logits, target)
            optimiser_step(opt, self.net.params, loss, self.GRAD_CLIP)
            self.optimiser_steps += 1

    # -- checkpoints
    STATE_FORMAT = 2  # 2: the states-something flag and the margin feature

    def state_bytes(self, *, optimiser: bool = True) -> bytes:
        """The student's weights, optimiser, calibration and counters (b"" before its
        first question): what the memory saves as the ``operations`` checkpoint. A prior
        is written without the optimiser (two thirds of the bytes): a memory starting from
        it fine-tunes with a fresh one."""
        with self._lock:
            if self.net is None:
                return b""
            # Without torch while the network and the optimiser are still the loaded ones
            # (nothing trained here): torchfile writes what torch.save would. An optimiser
            # never built (a prior's fresh one) is saved as None: fresh again when loaded.
            plain = not self.net.built and self._opt is None
            state = {"format": self.STATE_FORMAT, "dim": self.net.dim, "k": self.k,
                     "modules": self.net.weights if plain else self.net.network.state_dict(),
                     "temperature": self.calibrator.temperature,
                     "labelled": self.labelled, "agreed": self.agreed, "recent": list(self._recent),
                     "steps": self.optimiser_steps}
            if optimiser:
                state["optimiser"] = self._opt_state if plain else self._optimiser().state_dict()
            return torchfile.write_checkpoint(state, tensors=not plain)

    def load_bytes(self, data: bytes) -> None:
        """Restore :meth:`state_bytes`; CheckpointError (nothing changed) when the bytes are
        not a student of this shape."""
        from ..errors import CheckpointError

        if not data:
            return
        from .nets import check_optimiser_state, check_weights, operation_shapes

        try:
            state = torchfile.as_numpy(torchfile.read_checkpoint(data))  # without torch where it can
            if not isinstance(state, dict) or state.get("format") != self.STATE_FORMAT or state.get("k") != self.k:
                raise CheckpointError("not an operation-student checkpoint of this shape")
            dim = int(state["dim"])
            weights = state["modules"]
            shapes = operation_shapes(dim, self.k, N_FLAGS, N_PAIR)
            check_weights(weights, shapes)  # as load_state_dict checks
            net = _StudentNet(dim, self.k, seed=self.seed, weights=weights)
            opt_state = state.get("optimiser")
            if opt_state is not None:  # as Adam.load_state_dict checks: one group of every parameter
                try:
                    check_optimiser_state(opt_state, [shapes])
                except ValueError as exc:
                    raise CheckpointError(f"the optimiser state does not fit the network: {exc}") from None
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unreadable checkpoint is the same error
            raise CheckpointError(f"unreadable operation-student checkpoint: {exc}") from None
        with self._lock:
            self._prior = None  # a checkpoint replaces the prior
            self.net, self._opt, self._opt_state = net, None, opt_state
            self.calibrator.temperature = float(state["temperature"])
            self.labelled, self.agreed = int(state["labelled"]), int(state["agreed"])
            self._recent.clear()
            self._recent.extend(int(x) for x in state["recent"])
            self.optimiser_steps = int(state["steps"])

    def _start_from_prior(self, data: bytes, trusted: bool, *, dim: int) -> None:
        from ..errors import CheckpointError

        try:
            self.load_bytes(data)
        except CheckpointError:  # a prior of another shape: start from scratch
            return
        if self.net is None or self.net.dim != dim:  # another embedder's prior
            self.net = self._opt = self._opt_state = None
            self.optimiser_steps = 0
            self._forget_teacher()
            return
        if not trusted:
            self._forget_teacher()
        self.prior_used = "trusted" if trusted else "weights only"

    def _forget_teacher(self) -> None:
        """Drop what was learned about a teacher's answers beyond the weights: the label
        counts, the recent agreement and the calibration (the gate closes again)."""
        self.labelled = self.agreed = 0
        self._recent.clear()
        self.calibrator.temperature = 1.0

    def stats(self) -> dict[str, Any]:
        return {"prior": self.prior_used, "labelled": self.labelled,
                "agreement": self.agreed / self.labelled if self.labelled else None,
                "optimiser_steps": self.optimiser_steps, "temperature": self.calibrator.temperature,
                "recent_agreement": sum(self._recent) / len(self._recent) if self._recent else None,
                "gate_open": self.gate_open()}
