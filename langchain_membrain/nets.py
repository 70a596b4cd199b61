"""The networks' sizes and their inference in numpy, without torch.

models.py defines the networks in torch, for training. A process that only places facts
(``membrain add``, the first inserts of a program) runs them from a loaded checkpoint or
prior with the functions below: the same computation as the modules' ``forward`` on one
example, in float32 (attention, LayerNorm, GELU with the erf approximation of torch's CPU
kernel), so that it need not import torch (2 to 4 s on a 2-core machine). Their logits
match torch's to float32 rounding (``tests/test_nets.py`` checks every network on random
weights and inputs, and that :func:`parameter_shapes` is what the torch modules hold).

Weights are a state dict of numpy arrays (``torchfile.load`` of a checkpoint).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from . import features as ft
from .minilm import gelu_

NEG = -1e9  # logit of a masked option (finite, so masked rows never turn into NaN)
_F = np.float32


@dataclass(frozen=True)
class ModelConfig:
    """Sizes of both networks.

    ``dim`` is the text-embedding dimension (read from the embedder); ``top_k`` caps the
    stage-1 candidates (the current node plus ``top_k - 1`` child aspects) and
    ``max_context_facts`` the child facts shown as context.
    """

    dim: int = 384
    d_model: int = 64
    layers: int = 1
    heads: int = 4
    dropout: float = 0.0
    top_k: int = 32
    max_context_facts: int = 8
    max_closure_facts: int = 48
    pair_dim: int = 16  # facts are projected to this size before the pairwise heads (N^2 cost)
    skip_scale: float = 10.0  # the skip heads read num * skip_scale (see Stage1Net)
    stage1_num: int = ft.STAGE1_NUM
    stage2_num: int = ft.STAGE2_NUM
    demote_pair_num: int = ft.DEMOTE_PAIR_NUM
    group_pair_num: int = ft.GROUP_PAIR_NUM

    def to_dict(self) -> dict:
        return asdict(self)


Weights = Mapping[str, np.ndarray]


# ------------------------------------------------------------------------ shapes
def _linear(name: str, n_in: int, n_out: int, bias: bool = True) -> dict[str, tuple[int, ...]]:
    out: dict[str, tuple[int, ...]] = {f"{name}.weight": (n_out, n_in)}
    if bias:
        out[f"{name}.bias"] = (n_out,)
    return out


def _layer_norm(name: str, n: int) -> dict[str, tuple[int, ...]]:
    return {f"{name}.weight": (n,), f"{name}.bias": (n,)}


def _encoder_shapes(cfg: ModelConfig, n_num: int) -> dict[str, tuple[int, ...]]:
    d = cfg.d_model
    out = {**_linear("encoder.text", 2 * cfg.dim, d, bias=False),
           "encoder.kind.weight": (len(ft.KINDS), d), "encoder.role.weight": (len(ft.ROLES), d),
           **_linear("encoder.num", n_num, d)}
    for i in range(cfg.layers):
        b = f"encoder.blocks.{i}"
        out.update({**_layer_norm(f"{b}.ln1", d), **_linear(f"{b}.attn.qkv", d, 3 * d),
                    **_linear(f"{b}.attn.proj", d, d), **_layer_norm(f"{b}.ln2", d),
                    **_linear(f"{b}.mlp.0", d, 4 * d), **_linear(f"{b}.mlp.2", 4 * d, d)})
    out.update(_layer_norm("encoder.ln_f", d))
    return out


def parameter_shapes(cfg: ModelConfig, stage: str) -> dict[str, tuple[int, ...]]:
    """The state-dict entries (name -> shape) of ``Stage1Net(cfg)`` (``stage="stage1"``)
    or ``Stage2Net(cfg)``, in their order: what a checkpoint read without torch must hold."""
    d, p = cfg.d_model, cfg.pair_dim
    if stage == "stage1":
        return {**_encoder_shapes(cfg, cfg.stage1_num), **_linear("head", d, 1), **_linear("skip", cfg.stage1_num, 1)}
    if stage != "stage2":
        raise ValueError(f"stage1 or stage2, not {stage!r}")
    return {**_encoder_shapes(cfg, cfg.stage2_num),
            **_linear("type_head.0", d + cfg.stage2_num, d), **_linear("type_head.2", d, 4),
            **_linear("type_skip", cfg.stage2_num, 4), **_linear("pair_proj", d, p),
            **_linear("demote_head.0", 2 * p + cfg.demote_pair_num, p), **_linear("demote_head.2", p, 1),
            **_linear("demote_skip", cfg.demote_pair_num, 1),
            **_linear("group_head.0", 2 * p + cfg.group_pair_num, p), **_linear("group_head.2", p, 1),
            **_linear("group_skip", cfg.group_pair_num, 1)}


def check_weights(weights: Weights, shapes: Mapping[str, tuple[int, ...]]) -> dict[str, np.ndarray]:
    """``weights`` as float32 arrays when they are exactly ``shapes`` (as a torch module's
    ``load_state_dict`` checks: no key missing, none unexpected, every shape equal);
    ValueError otherwise."""
    missing = [k for k in shapes if k not in weights]
    unexpected = [k for k in weights if k not in shapes]
    if missing or unexpected:
        raise ValueError(f"missing keys {missing}, unexpected keys {unexpected}")
    out = {}
    for k, shape in shapes.items():
        a = np.asarray(weights[k])
        if tuple(a.shape) != tuple(shape):
            raise ValueError(f"size mismatch for {k}: checkpoint {tuple(a.shape)}, model {tuple(shape)}")
        out[k] = np.ascontiguousarray(a, dtype=_F)
    return out


def check_optimiser_state(state: Any, groups: Sequence[Mapping[str, tuple[int, ...]]]) -> None:
    """What ``Adam.load_state_dict`` (and ``AdamW``'s) checks of a saved optimiser state,
    checked without torch, and what its first step needs: one saved parameter group per
    entry of ``groups`` (each the shapes of its parameters by name, in the optimiser's
    order), holding as many parameters, and every state entry's moments the shape of its
    parameter. ValueError otherwise."""
    saved = state["param_groups"]
    if len(saved) != len(groups) or [len(g["params"]) for g in saved] != [len(g) for g in groups]:
        raise ValueError("loaded state dict contains a parameter group that doesn't match the size of optimizer's group")
    shapes = [(name, shape) for g in groups for name, shape in g.items()]
    index = [i for g in saved for i in g["params"]]
    for i, entry in state["state"].items():
        name, shape = shapes[index.index(i)]
        for key in ("exp_avg", "exp_avg_sq"):
            if key in entry and tuple(np.shape(entry[key])) != tuple(shape):
                raise ValueError(f"optimiser state of {name} has shape {np.shape(entry[key])}")


# --------------------------------------------------------------------- forwards
def _lin(w: Weights, name: str, x: np.ndarray) -> np.ndarray:
    y = x @ w[f"{name}.weight"].T
    b = w.get(f"{name}.bias")
    if b is not None:
        y += b
    return y


def _ln(w: Weights, name: str, x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    d = x - mu
    var = np.square(d).mean(-1, keepdims=True)
    d /= np.sqrt(var + _F(eps))
    d *= w[f"{name}.weight"]
    d += w[f"{name}.bias"]
    return d


def _mlp(w: Weights, name: str, x: np.ndarray, act: str = "gelu") -> np.ndarray:
    """``Sequential(Linear, GELU or ReLU, Linear)`` (named ``name.0`` and ``name.2``)."""
    h = _lin(w, f"{name}.0", x)
    h = gelu_(h) if act == "gelu" else np.maximum(h, _F(0.0))
    return _lin(w, f"{name}.2", h)


def encode_tokens(w: Weights, cfg: ModelConfig, text: np.ndarray, kind: np.ndarray, role: np.ndarray,
                  num: np.ndarray) -> np.ndarray:
    """``TokenEncoder.forward`` of one example whose tokens are all real: (T, d_model)."""
    x = text @ w["encoder.text.weight"].T
    x += w["encoder.kind.weight"][kind]
    x += w["encoder.role.weight"][role]
    x += _lin(w, "encoder.num", num)
    T, C = x.shape
    H = cfg.heads
    hd = C // H
    scale = _F(1.0 / np.sqrt(hd))
    for i in range(cfg.layers):
        b = f"encoder.blocks.{i}"
        qkv = _lin(w, f"{b}.attn.qkv", _ln(w, f"{b}.ln1", x)).reshape(T, 3, H, hd)
        q = np.ascontiguousarray(qkv[:, 0].transpose(1, 0, 2))  # (H, T, hd)
        k = np.ascontiguousarray(qkv[:, 1].transpose(1, 2, 0))  # (H, hd, T)
        v = np.ascontiguousarray(qkv[:, 2].transpose(1, 0, 2))
        s = q @ k
        s *= scale
        s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(-1, keepdims=True)
        y = (s @ v).transpose(1, 0, 2).reshape(T, C)
        x = x + _lin(w, f"{b}.attn.proj", y)
        x = x + _mlp(w, f"{b}.mlp", _ln(w, f"{b}.ln2", x))
    return _ln(w, "encoder.ln_f", x)


def _text(label: np.ndarray, mean: np.ndarray) -> np.ndarray:
    return np.concatenate([label, mean], axis=1).astype(_F, copy=False)


def stage1_logits(w: Weights, cfg: ModelConfig, f: ft.Stage1Features) -> np.ndarray:
    """``Stage1Net`` on one example: (T,) logits, :data:`NEG` off the candidates."""
    num = f.num.astype(_F, copy=False)
    h = encode_tokens(w, cfg, _text(f.label, f.mean), f.kind, f.role, num)
    logits = (_lin(w, "head", h) + _lin(w, "skip", num * _F(cfg.skip_scale)))[:, 0]
    cand = np.zeros(f.n_tokens, bool)
    cand[1:1 + f.n_candidates] = True
    return np.where(cand, logits, _F(NEG))


def stage2_logits(w: Weights, cfg: ModelConfig, f: ft.Stage2Features) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Stage2Net`` on one closure: type (N, 4), demote (N, A) and group (N, N) logits."""
    num = f.num.astype(_F, copy=False)
    h = encode_tokens(w, cfg, _text(f.label, f.mean), f.kind, f.role, num)
    fact_tok = np.asarray(f.fact_tok, np.int64)
    aspect_tok = np.asarray(f.aspect_tok, np.int64)
    N, A = len(fact_tok), len(aspect_tok)
    k = _F(cfg.skip_scale)
    hf, nf = h[fact_tok], num[fact_tok]
    types = _mlp(w, "type_head", np.concatenate([hf, nf], -1)) + _lin(w, "type_skip", nf * k)
    types = np.where(f.type_mask(), types, _F(NEG))

    ha = _lin(w, "pair_proj", h[aspect_tok])  # (A, p)
    hf = _lin(w, "pair_proj", hf)  # (N, p)
    p = hf.shape[-1]
    fa = np.broadcast_to(hf[:, None], (N, A, p))
    aa = np.broadcast_to(ha[None], (N, A, p))
    demote_pair = np.asarray(f.demote_pair, _F).reshape(N, A, cfg.demote_pair_num)
    pair_in = np.concatenate([fa * aa, np.abs(fa - aa), demote_pair], -1)
    demote = (_mlp(w, "demote_head", pair_in) + _lin(w, "demote_skip", demote_pair * k))[..., 0]

    gi = np.broadcast_to(hf[:, None], (N, N, p))
    gj = np.broadcast_to(hf[None], (N, N, p))
    group_pair = np.asarray(f.group_pair, _F).reshape(N, N, cfg.group_pair_num)
    group_in = np.concatenate([gi * gj, np.abs(gi - gj), group_pair], -1)
    group = (_mlp(w, "group_head", group_in) + _lin(w, "group_skip", group_pair * k))[..., 0]
    group = np.where(np.eye(N, dtype=bool), _F(NEG), group)
    return types, demote.reshape(N, A), group


def operation_logits(w: Weights, e: np.ndarray, flags: np.ndarray, cands: np.ndarray,
                     pairnum: np.ndarray) -> np.ndarray:
    """``OperationNet`` on one item (e (dim,), flags, cands (k, dim), pairnum (k, n_pair)):
    logits (2 + 3k,), -inf where a candidate is missing."""
    e, flags = e.astype(_F, copy=False), flags.astype(_F, copy=False)
    cands, pairnum = cands.astype(_F, copy=False), pairnum.astype(_F, copy=False)
    h = np.maximum(_lin(w, "item.0", np.concatenate([e, flags])), _F(0.0))
    head = _lin(w, "item_out", h)
    p = np.maximum(_lin(w, "pair_in", cands * e[None, :]), _F(0.0))
    kk = cands.shape[0]
    z = _mlp(w, "pair", np.concatenate([np.broadcast_to(h[None], (kk, h.shape[0])), p, pairnum], 1), act="relu")
    z = np.where(pairnum[:, -1:] < 0.5, _F(-np.inf), z)
    return np.concatenate([head, z[:, 0], z[:, 1], z[:, 2]])


def operation_shapes(dim: int, k: int, n_flags: int, n_pair: int, hidden: int = 64) -> dict[str, tuple[int, ...]]:
    """The state-dict entries of ``OperationNet(dim, k, n_flags, n_pair, hidden)``."""
    return {**_linear("item.0", dim + n_flags, hidden), **_linear("item_out", hidden, 2),
            **_linear("pair_in", dim, 32), **_linear("pair.0", hidden + 32 + n_pair, hidden),
            **_linear("pair.2", hidden, 3)}


__all__ = ["ModelConfig", "NEG", "check_optimiser_state", "check_weights", "encode_tokens", "operation_logits", "operation_shapes",
           "parameter_shapes", "stage1_logits", "stage2_logits"]
