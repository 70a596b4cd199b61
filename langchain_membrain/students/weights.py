"""Where a trainer's two networks live: the weights as loaded, in numpy, until the first
training; torch from then on.

A process that only places facts runs the networks from a loaded checkpoint or prior in
numpy (nets.py) and never imports torch. :class:`TrainerNetworks` holds either state: the
loaded weights, optimiser states and learning-rate scale, or the torch half
(:class:`TorchNets`: training networks, inference copies, optimisers), built on first use
from what was loaded, else from a random initialisation seeded by the training config.
The trainer (training.py) owns the locks it is given; the holder takes them in the one
order the trainer does (``lock``, then ``infer_lock``).
"""

from __future__ import annotations

import copy
import threading
from typing import TYPE_CHECKING, Any

from . import torchfile
from .nets import ModelConfig, check_weights, parameter_shapes
from .training_config import StageTraining, TrainingConfig

if TYPE_CHECKING:  # pragma: no cover - torch is imported where the networks are trained
    import torch


def resolve_device(device: str | None) -> "torch.device":
    import torch

    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def optimiser_groups(shapes: dict[str, tuple[int, ...]]) -> list[dict[str, tuple[int, ...]]]:
    """A stage's parameters (``shapes``, by name) as its optimiser groups them
    (:func:`optimiser`): the network's own parameters, then its skip heads."""
    return [{n: s for n, s in shapes.items() if "skip" not in n}, {n: s for n, s in shapes.items() if "skip" in n}]


class TorchNets:
    """The torch half of a trainer: the training networks, their inference copies (with
    their TorchScript traces) and the optimisers."""

    def __init__(self, stage1: Any, stage2: Any, opt1: Any, opt2: Any, device: Any):
        self.stage1, self.stage2, self.opt1, self.opt2, self.device = stage1, stage2, opt1, opt2, device
        self.infer1 = copy.deepcopy(stage1).eval()
        self.infer2 = copy.deepcopy(stage2).eval()
        self.traced: dict[str, Any] = {}  # stage -> trace of infer1/infer2 sharing its parameters (None: failed)


def optimiser(net: "torch.nn.Module", st: StageTraining, scale: float = 1.0) -> "torch.optim.Optimizer":
    """AdamW over two parameter groups (:func:`optimiser_groups`): the network's own
    parameters at ``st.lr``, its skip heads at ``st.skip_lr``, both scaled by ``scale``."""
    import torch

    skip = [p for n, p in net.named_parameters() if "skip" in n]
    rest = [p for n, p in net.named_parameters() if "skip" not in n]
    return torch.optim.AdamW([{"params": rest, "lr": st.lr * scale}, {"params": skip, "lr": st.skip_lr * scale}],
                             lr=st.lr * scale, weight_decay=st.weight_decay)


class TrainerNetworks:
    """A trainer's two networks: loaded numpy weights until :meth:`torch` is first called,
    the torch half after (see the module docstring)."""

    def __init__(self, model_config: ModelConfig, config: TrainingConfig, lock: threading.RLock,
                 infer_lock: threading.RLock):
        self.model_config, self.config = model_config, config
        self.lock, self.infer_lock = lock, infer_lock
        self._t: TorchNets | None = None
        # While torch is not built: the loaded networks (numpy state dicts, per stage) that
        # inference runs on, the loaded optimiser states, and the learning-rate scale of
        # fresh optimisers (a prior's fine-tuning, see OnlineTrainer.load_prior).
        self._weights: dict[str, Any] | None = None
        self._opt_states: tuple[Any, Any] | None = None
        self._lr_scale = 1.0

    @property
    def built(self) -> bool:
        """Whether the networks are in torch yet."""
        return self._t is not None

    def torch(self) -> TorchNets:
        """The torch half, built on first use (imports torch). Call it holding no lock but
        ``lock`` (never ``infer_lock`` alone: see ``OnlineTrainer.predict_stage1``)."""
        t = self._t
        if t is None:
            with self.lock, self.infer_lock:
                if self._t is None:
                    self._t = self._build()
                    self._weights = self._opt_states = None
                t = self._t
        return t

    def _build(self) -> TorchNets:
        import torch

        from .models import Stage1Net, Stage2Net

        device = resolve_device(self.config.device)
        torch.manual_seed(self.config.seed)
        s1 = Stage1Net(self.model_config).to(device).eval()
        s2 = Stage2Net(self.model_config).to(device).eval()
        if self._weights is not None:
            s1.load_state_dict(torchfile.as_tensors(self._weights["stage1"], device))
            s2.load_state_dict(torchfile.as_tensors(self._weights["stage2"], device))
        o1 = optimiser(s1, self.config.stage1, self._lr_scale)
        o2 = optimiser(s2, self.config.stage2, self._lr_scale)
        if self._opt_states is not None:
            o1.load_state_dict(torchfile.as_tensors(self._opt_states[0], device))
            o2.load_state_dict(torchfile.as_tensors(self._opt_states[1], device))
        return TorchNets(s1, s2, o1, o2, device)

    def publish(self) -> None:
        """Copy the training networks' parameters into the inference copies (in place, so
        the traces of ``infer1`` and ``infer2`` stay valid)."""
        t = self.torch()
        with self.lock:
            s1, s2 = t.stage1.state_dict(), t.stage2.state_dict()
            with self.infer_lock:
                t.infer1.load_state_dict(s1)
                t.infer2.load_state_dict(s2)

    def numpy_weights(self, stage: str) -> Any:
        """The loaded weights inference runs on in numpy, or None once torch holds the
        networks (or when none were loaded: a random initialisation is made in torch).
        Read under ``infer_lock``."""
        weights = self._weights
        return weights[stage] if weights is not None and self._t is None else None

    def loaded(self) -> tuple[dict[str, Any], tuple[Any, Any] | None, float] | None:
        """(weights, optimiser states, learning-rate scale) as loaded, while torch is not
        built and weights were loaded (a checkpoint written back without torch), else None.
        The optimiser states are None where none were loaded (a prior): fresh optimisers at
        that scale."""
        if self._t is None and self._weights is not None:
            return self._weights, self._opt_states, self._lr_scale
        return None

    def checked(self, weights: Any, stage: str) -> Any:
        """A stage's loaded weights as numpy (a state dict), checked as ``load_state_dict``
        would check them (ValueError)."""
        weights = torchfile.as_numpy(weights)
        check_weights(weights, parameter_shapes(self.model_config, stage))
        return weights

    def torch_copy(self, s1_state: Any, s2_state: Any, opt_states: tuple[Any, Any] | None,
                   scale: float = 1.0) -> TorchNets:
        """New torch networks (and optimisers) loaded with these states, checked by torch."""
        from .models import Stage1Net, Stage2Net

        device = self.torch().device
        s1, s2 = Stage1Net(self.model_config).to(device), Stage2Net(self.model_config).to(device)
        s1.load_state_dict(torchfile.as_tensors(torchfile.as_numpy(s1_state), device))
        s2.load_state_dict(torchfile.as_tensors(torchfile.as_numpy(s2_state), device))
        o1 = optimiser(s1, self.config.stage1, scale)
        o2 = optimiser(s2, self.config.stage2, scale)
        if opt_states is not None:
            o1.load_state_dict(torchfile.as_tensors(torchfile.as_numpy(opt_states[0]), device))
            o2.load_state_dict(torchfile.as_tensors(torchfile.as_numpy(opt_states[1]), device))
        return TorchNets(s1.eval(), s2.eval(), o1, o2, device)

    def install_numpy(self, weights: dict[str, Any], opt_states: tuple[Any, Any] | None, lr_scale: float) -> None:
        """Run on these loaded weights (until the first training). Hold ``lock`` and
        ``infer_lock``."""
        self._weights, self._opt_states, self._lr_scale = weights, opt_states, lr_scale

    def install_torch(self, nets: TorchNets) -> None:
        """Run on these torch networks (re-traced at the next prediction). Hold ``lock``
        and ``infer_lock``."""
        self._t = nets


__all__ = ["TorchNets", "TrainerNetworks", "optimiser", "optimiser_groups", "resolve_device"]
