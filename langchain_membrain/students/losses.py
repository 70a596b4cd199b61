"""The losses the placement networks are trained on (training.OnlineTrainer), one batch of
teacher-labelled decisions at a time.

- Stage 1 (:func:`stage1_loss`): cross-entropy of the candidate logits against the
  teacher's index.
- Stage 2 (:func:`stage2_loss`): cross-entropy of the action type per fact (non-Idle classes
  weighted up by ``nonidle_weight``: Idle dominates), cross-entropy of the demote target for
  facts the teacher demoted (times ``demote_weight``), and binary cross-entropy of the
  pairwise group logits against "both in one teacher Group" (positives weighted by
  ``pair_pos_weight``).

This module imports torch (the trainer imports it when it first trains).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch
import torch.nn.functional as F

from .decoding import Stage2Labels
from .features import Stage1Features, Stage2Features
from .models import collate_stage1, collate_stage2

if TYPE_CHECKING:  # pragma: no cover
    from .training_config import TrainingConfig


def stage1_loss(net: torch.nn.Module, batch: list[tuple[Stage1Features, int]], device: torch.device) -> torch.Tensor:
    """The stage-1 loss of a batch of (features, teacher's candidate index) on ``device``.
    Logit 0 is the new fact's own token, so candidate ``y`` is logit ``1 + y``."""
    b = collate_stage1([f for f, _ in batch], device)
    target = torch.tensor([1 + y for _, y in batch], device=device)
    return F.cross_entropy(net(b), target)


def stage2_loss(net: torch.nn.Module, batch: list[tuple[Stage2Features, Stage2Labels]], cfg: TrainingConfig,
                device: torch.device) -> torch.Tensor:
    """The stage-2 loss of a batch of (features, teacher's labels): type CE + demote CE +
    pairwise group BCE, weighted by ``cfg``."""
    b = collate_stage2([f for f, _ in batch], device)
    type_logits, demote_logits, group_logits = net(b)
    B, N, A = demote_logits.shape
    types = torch.zeros(B, N, dtype=torch.long)
    targets = torch.full((B, N), -100, dtype=torch.long)
    together = torch.zeros(B, N, N)
    for i, (_, lab) in enumerate(batch):
        n = len(lab.types)
        types[i, :n] = torch.as_tensor(lab.types)
        targets[i, :n] = torch.as_tensor(np.where(lab.targets >= 0, lab.targets, -100))
        together[i, :n, :n] = torch.as_tensor(lab.together)
    types, targets, together = types.to(device), targets.to(device), together.to(device)
    fact_mask = b["fact_mask"]
    weight = torch.tensor([1.0] + [cfg.nonidle_weight] * 3, device=device)
    ce = F.cross_entropy(type_logits.reshape(-1, 4), types.reshape(-1), weight=weight, reduction="none")
    loss = (ce * fact_mask.reshape(-1)).sum() / fact_mask.sum().clamp(min=1)
    if A and (targets >= 0).any():
        loss = loss + cfg.demote_weight * F.cross_entropy(demote_logits.reshape(-1, A), targets.reshape(-1),
                                                          ignore_index=-100)
    pair_ok = fact_mask[:, :, None] & fact_mask[:, None, :]
    pair_ok = pair_ok & torch.triu(torch.ones(N, N, dtype=torch.bool, device=device), 1)[None]
    if pair_ok.any():
        bce = F.binary_cross_entropy_with_logits(
            group_logits[pair_ok], together[pair_ok],
            pos_weight=torch.tensor(cfg.pair_pos_weight, device=device))
        loss = loss + bce
    return loss
