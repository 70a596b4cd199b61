"""The settings of online training (README, Concepts; the trainer: training.py).

- :class:`Policy`: for one stage (or the operation student), *which* decision is executed
  and *when* the teacher is asked.
- :class:`StageTraining`: the optimiser settings of one placement stage.
- :class:`TrainingConfig`: all training settings of the placement stages.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Execute = Literal["teacher", "model", "auto"]
Query = Literal["always", "uncertain", "never"]


@dataclass(frozen=True)
class Policy:
    """Who decides, and when the teacher is asked, for one stage.

    ``warmup``: labelled decisions the stage must have seen before ``auto`` lets the model
    decide alone. ``audit_rate``: with ``query="uncertain"``, the share of the model's
    confident decisions that are still sent to the teacher, so agreement and calibration
    stay measured on an unbiased sample.
    """

    execute: Execute = "auto"
    query: Query = "uncertain"
    confidence: float = 0.9
    audit_rate: float = 0.02
    warmup: int = 64

    def __post_init__(self) -> None:
        if self.execute not in ("teacher", "model", "auto"):
            raise ValueError(f"execute must be teacher, model or auto, not {self.execute!r}")
        if self.query not in ("always", "uncertain", "never"):
            raise ValueError(f"query must be always, uncertain or never, not {self.query!r}")


@dataclass(frozen=True)
class StageTraining:
    """Optimiser settings of one stage."""

    batch_size: int = 16
    steps_per_batch: int = 1
    replay_size: int = 1024
    replay_batch: int = 32
    lr: float = 3e-3
    skip_lr: float = 3e-2  # for the linear skip heads (parameters named ``*skip*``)
    weight_decay: float = 1e-4


@dataclass(frozen=True)
class TrainingConfig:
    """All training settings. ``device=None`` picks CUDA when available, else CPU."""

    stage1: StageTraining = field(default_factory=lambda: StageTraining(batch_size=16, steps_per_batch=6, lr=1e-2,
                                                                        skip_lr=1e-1))
    stage2: StageTraining = field(default_factory=lambda: StageTraining(batch_size=8, steps_per_batch=12, lr=1e-2,
                                                                        skip_lr=1e-1, replay_size=768))
    nonidle_weight: float = 2.0
    pair_pos_weight: float = 3.0
    demote_weight: float = 1.0
    calibration_window: int = 128
    calibrate_every: int = 16
    grad_clip: float = 1.0
    seed: int = 0
    device: str | None = None
    trace_inference: bool = True  # run inference through TorchScript traces of both networks (faster)
    # Learning rates (both stages, skip heads included) are multiplied by this when the
    # networks start from a prior: fine-tuning. A fresh Adam moves every weight by about its
    # learning rate per step whatever the gradient, so the from-scratch rates undo a prior
    # within a few batches of a new teacher's labels.
    prior_lr_scale: float = 0.3
    # CPU threads torch uses for these networks' forwards and optimiser steps (None: torch's
    # own setting, one per core); one is fastest at these sizes (models.torch_threads).
    threads: int | None = 1

    def __post_init__(self) -> None:
        if not 0.0 < self.prior_lr_scale <= 1.0:
            raise ValueError(f"prior_lr_scale must be in (0, 1], not {self.prior_lr_scale!r}")
