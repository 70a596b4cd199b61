"""The small networks in torch, for training: their layers and forwards are nets.py's.

nets.py declares each network once, torch-free: its layers (names and sizes, from which
the modules here are built, so state-dict names are nets.py's) and its forward, written
over a few primitives (linear, layer norm, attention, ...). :data:`TORCH` gives them in
torch, ``nets.NUMPY`` in numpy, which a process that does not train runs instead (it need
not import torch, most of a short process's start):

- :class:`Stage1Net`: one logit per candidate (the current node, then its child aspects).
- :class:`Stage2Net`: per actable fact, logits over {idle, promote, demote, group}; per
  (fact, sibling aspect) a demote-target logit; per (fact, fact) a group-together logit.
- :class:`OperationNet` (no encoder): the memory operation of a new item (operation_student.py).

Every head also sees the token's numeric features directly (a skip path around the
encoder): the features carry the quantities a teacher compares, so a near-linear read of
them is most of the answer and the encoder only has to add context.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import features as ft
from . import nets
from .nets import NEG, ModelConfig  # noqa: F401 - importable from here as before


class TorchOps:
    """nets.py's primitives in torch: the functional calls of the nn modules they stand
    for (``nn.Linear``, ``nn.LayerNorm``, ``nn.GELU``, ...), so training computes what
    those modules compute."""

    linear = staticmethod(F.linear)
    gelu = staticmethod(F.gelu)
    relu = staticmethod(torch.relu)
    cat = staticmethod(torch.cat)
    embed = staticmethod(lambda w, idx: F.embedding(idx, w))
    dropout = staticmethod(lambda x, p: F.dropout(x, p, True) if p else x)
    expand = staticmethod(lambda x, *sizes: x.expand(*sizes))
    masked_fill = staticmethod(lambda x, mask, value: x.masked_fill(mask, value))
    eye = staticmethod(lambda n, like: torch.eye(n, dtype=torch.bool, device=like.device))

    @staticmethod
    def layer_norm(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, w.shape, w, b, 1e-5)

    @staticmethod
    def attention(qkv: torch.Tensor, tok_mask: torch.Tensor, heads: int, drop: float) -> torch.Tensor:
        B, T, C3 = qkv.shape
        C = C3 // 3
        q, k, v = qkv.split(C, dim=2)
        q, k, v = (t.view(B, T, heads, C // heads).transpose(1, 2) for t in (q, k, v))
        attn_mask = tok_mask[:, None, None, :]  # (B, 1, 1, T): keys that may be attended
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=drop)
        return y.transpose(1, 2).reshape(B, T, C)

    @staticmethod
    def gather(h: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.gather(h, 1, idx.unsqueeze(-1).expand(-1, -1, h.shape[-1]))


TORCH = TorchOps()


def _module(layer: nets.Layer) -> nn.Module:
    if layer.kind == "linear":
        return nn.Linear(layer.n_in, layer.n_out, bias=layer.bias)
    if layer.kind == "embedding":
        return nn.Embedding(layer.n_in, layer.n_out)
    return nn.LayerNorm(layer.n_out)


class Layers(nn.Module):
    """A network's parameters: its nets.py layers as torch modules, built in their order
    (which fixes what a seed initialises them to) at their names (``encoder.blocks.0.ln1``
    is the module ``ln1`` in ``0`` in ``blocks`` in ``encoder``)."""

    def __init__(self, layers: list[nets.Layer]):
        super().__init__()
        for layer in layers:
            *path, leaf = layer.name.split(".")
            parent: nn.Module = self
            for part in path:
                child = dict(parent.named_children()).get(part)
                if child is None:
                    child = nn.Module()
                    parent.add_module(part, child)
                parent = child
            parent.add_module(leaf, _module(layer))

    def weights(self) -> dict[str, nn.Parameter]:
        return dict(self.named_parameters())


def _init_weights(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)


class Stage1Net(Layers):
    """New fact + two-layer subtree -> (B, T) logits (nets.stage1_forward)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(nets.stage1_layers(cfg))
        self.cfg = cfg
        _init_weights(self)

    def forward(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        return nets.stage1_forward(TORCH, self.weights(), self.cfg, b, self.cfg.dropout if self.training else 0.0)


class Stage2Net(Layers):
    """Closure -> (type logits (B, N, 4), demote logits (B, N, A), group logits (B, N, N))
    (nets.stage2_forward)."""

    def __init__(self, cfg: ModelConfig):
        super().__init__(nets.stage2_layers(cfg))
        self.cfg = cfg
        _init_weights(self)

    def forward(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return nets.stage2_forward(TORCH, self.weights(), self.cfg, b, self.cfg.dropout if self.training else 0.0)


class OperationNet(Layers):
    """New item + its ``k`` candidate facts -> memory-operation logits (operation_student.py):
    ``[ADD, IGNORE, UPDATE_1..k, DELETE-keep_1..k, DELETE-drop_1..k]``.

    An item encoder (embedding and flags) gives the ADD and IGNORE logits; a pair scorer
    reads the item's hidden vector, the elementwise product of the item and a candidate
    (projected small) and the candidate's numeric features (the last one: 1 where the
    candidate is present), and gives its three logits. A missing candidate's are -inf.
    """

    def __init__(self, dim: int, k: int, n_flags: int, n_pair: int, hidden: int = 64):
        super().__init__(nets.operation_layers(dim, k, n_flags, n_pair, hidden))
        self.k = k

    def forward(self, e: torch.Tensor, flags: torch.Tensor, cands: torch.Tensor,
                pairnum: torch.Tensor) -> torch.Tensor:
        """e (B, dim), flags (B, n_flags), cands (B, k, dim), pairnum (B, k, n_pair) ->
        logits (B, 2 + 3k)."""
        return nets.operation_forward(TORCH, self.weights(), e, flags, cands, pairnum)


# ----------------------------------------------------------------------------- batching
def _tensors(arrays: dict[str, Any], device: str | torch.device) -> dict[str, torch.Tensor]:
    b = {k: torch.from_numpy(v) for k, v in arrays.items()}  # no copy (the insert's hot path)
    return b if str(device) == "cpu" else {k: v.to(device) for k, v in b.items()}


def collate_stage1(feats: list[ft.Stage1Features], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Stage-1 examples as a batch of tensors (nets.stage1_batch)."""
    return _tensors(nets.stage1_batch(feats), device)


def collate_stage2(feats: list[ft.Stage2Features], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    """Closures as a batch of tensors (nets.stage2_batch)."""
    return _tensors(nets.stage2_batch(feats), device)


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run torch on ``n`` CPU threads inside the block, then restore the calling thread's
    setting (``None`` leaves it alone).

    These networks are small enough that spreading one operation over threads costs more
    than it saves: a forward is several times slower on two threads than on one, and a
    training batch takes no less wall time on one thread, at less CPU. torch keeps the count
    per thread,
    but also as the default of threads started meanwhile and as MKL's global setting,
    which is why it is set only around this package's own work and restored at once.
    """
    prev = torch.get_num_threads()
    if n is None or n == prev:
        yield
        return
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prev)


def optimiser_step(opt: torch.optim.Optimizer, params: Iterable[nn.Parameter], loss: torch.Tensor,
                   clip: float) -> None:
    """One optimiser step on ``loss``, as every network here trains: gradients cleared,
    back-propagated, their joint norm over ``params`` clipped to ``clip`` (0: not
    clipped), then the step."""
    opt.zero_grad(set_to_none=True)
    loss.backward()
    if clip:
        torch.nn.utils.clip_grad_norm_(params, clip)
    opt.step()


def trace(net: nn.Module, example: tuple, *, strict: bool = True) -> Any:
    """A TorchScript trace of ``net`` on ``example`` (its inputs), or None when it cannot be
    traced (the caller then runs ``net`` eagerly: the same computation). The trace shares
    the network's parameters, so training and parameter copies reach it; it cuts the Python
    overhead of a single item's forward (the insert's hot path). ``strict=False`` lets a
    network take a dict of inputs (the placement stages' batches)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer warnings about shapes read as constants
            return torch.jit.trace(net, example, strict=strict, check_trace=False)
    except Exception:  # noqa: BLE001 - any failure to trace: run eagerly
        return None


def count_parameters(module: nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


__all__ = [
    "Stage1Net", "Stage2Net", "OperationNet", "collate_stage1", "collate_stage2", "count_parameters",
    "optimiser_step", "trace",
]
