"""The small networks, nanoGPT-style: read it top to bottom.

The two placement networks turn node tokens (features.py) into hidden vectors with a small
transformer encoder (pre-norm blocks, no positional encoding: a subtree or closure is a
set, and the role/kind ids say what each token is), then read logits off them:

- :class:`Stage1Net`: one logit per candidate (the current node, then its child aspects).
- :class:`Stage2Net`: per actable fact, logits over {idle, promote, demote, group}; per
  (fact, sibling aspect) a demote-target logit; per (fact, fact) a group-together logit.
- :class:`OperationNet` (no encoder): the memory operation of a new item (operation_student.py).

Every head also sees the token's numeric features directly (a skip path around the
encoder): the features carry the quantities a teacher compares, so a near-linear read of
them is most of the answer and the encoder only has to add context.

Batches: tokens are padded to the widest example; ``tok_mask`` is True on real tokens.
Impossible options get :data:`NEG` instead of their logit, so softmax gives them ~0 and
argmax never picks them.

nets.py holds :class:`ModelConfig` and the same forwards in numpy, which a process that
does not train runs instead (a change to a forward here is made there too; a test checks
that both compute the same logits).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from . import features as ft
from .nets import NEG, ModelConfig  # torch-free (nets.py also runs these networks in numpy)


class SelfAttention(nn.Module):
    """Multi-head self-attention over the tokens of one example; padding is never attended."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        assert cfg.d_model % cfg.heads == 0, "d_model must be divisible by heads"
        self.heads = cfg.heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.dropout = cfg.dropout

    def forward(self, x: torch.Tensor, tok_mask: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.qkv(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
        attn_mask = tok_mask[:, None, None, :]  # (B, 1, 1, T): keys that may be attended
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.proj(y.transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = SelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = nn.Sequential(nn.Linear(cfg.d_model, 4 * cfg.d_model), nn.GELU(),
                                 nn.Linear(4 * cfg.d_model, cfg.d_model), nn.Dropout(cfg.dropout))

    def forward(self, x: torch.Tensor, tok_mask: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), tok_mask)
        return x + self.mlp(self.ln2(x))


class TokenEncoder(nn.Module):
    """Token embedding (label and mean text embeddings, kind, role, numeric features)
    followed by the transformer blocks and a final LayerNorm."""

    def __init__(self, cfg: ModelConfig, n_num: int):
        super().__init__()
        # One projection of [label, mean] (one matmul instead of two: inference latency).
        self.text = nn.Linear(2 * cfg.dim, cfg.d_model, bias=False)
        self.kind = nn.Embedding(len(ft.KINDS), cfg.d_model)
        self.role = nn.Embedding(len(ft.ROLES), cfg.d_model)
        self.num = nn.Linear(n_num, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.ln_f = nn.LayerNorm(cfg.d_model)

    def forward(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        x = self.text(b["text"]) + self.kind(b["kind"]) + self.role(b["role"]) + self.num(b["num"])
        for block in self.blocks:
            x = block(x, b["tok_mask"])
        return self.ln_f(x)


def _init_weights(module: nn.Module) -> None:
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Embedding):
            nn.init.normal_(m.weight, std=0.02)


class Stage1Net(nn.Module):
    """New fact + two-layer subtree -> one logit per token; only candidate tokens
    (``cand_mask``: the current node and its child aspects) get a real logit."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        self.encoder = TokenEncoder(cfg, cfg.stage1_num)
        self.head = nn.Linear(cfg.d_model, 1)
        self.skip = nn.Linear(cfg.stage1_num, 1)
        _init_weights(self)

    def forward(self, b: dict[str, torch.Tensor]) -> torch.Tensor:
        """Returns (B, T) logits; non-candidate tokens hold :data:`NEG`.

        logit = head(encoder(tokens)) + skip(num * skip_scale). The skip path is a linear
        read of the features: a teacher's rule is often a threshold on a similarity, with
        decisions a hundredth apart, so it needs large weights; the scale (and the higher
        learning rate the trainer gives ``*skip*`` parameters) gets there in few steps.
        """
        h = self.encoder(b)
        logits = (self.head(h) + self.skip(b["num"] * self.cfg.skip_scale)).squeeze(-1)
        return logits.masked_fill(~b["cand_mask"], NEG)


def _gather(h: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """Rows of ``h`` (B, T, C) at token indices ``idx`` (B, N) -> (B, N, C)."""
    return torch.gather(h, 1, idx.unsqueeze(-1).expand(-1, -1, h.shape[-1]))


class Stage2Net(nn.Module):
    """Closure -> (type logits (B, N, 4), demote logits (B, N, A), group logits (B, N, N)).

    Facts are the actable facts (the focal fact and its sibling facts), aspects the sibling
    aspects (Demote targets). Masks in the batch: ``type_mask`` (B, N, 4) possible action
    types, ``aspect_mask`` (B, A) real aspects, ``fact_mask`` (B, N) real facts.
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.cfg = cfg
        d = cfg.d_model
        self.encoder = TokenEncoder(cfg, cfg.stage2_num)
        self.type_head = nn.Sequential(nn.Linear(d + cfg.stage2_num, d), nn.GELU(), nn.Linear(d, 4))
        self.type_skip = nn.Linear(cfg.stage2_num, 4)
        p = cfg.pair_dim
        self.pair_proj = nn.Linear(d, p)
        self.demote_head = nn.Sequential(nn.Linear(2 * p + cfg.demote_pair_num, p), nn.GELU(), nn.Linear(p, 1))
        self.demote_skip = nn.Linear(cfg.demote_pair_num, 1)
        self.group_head = nn.Sequential(nn.Linear(2 * p + cfg.group_pair_num, p), nn.GELU(), nn.Linear(p, 1))
        self.group_skip = nn.Linear(cfg.group_pair_num, 1)
        _init_weights(self)

    def forward(self, b: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = self.encoder(b)
        hf = _gather(h, b["fact_tok"])  # (B, N, d)
        nf = torch.gather(b["num"], 1, b["fact_tok"].unsqueeze(-1).expand(-1, -1, b["num"].shape[-1]))
        k = self.cfg.skip_scale
        type_logits = self.type_head(torch.cat([hf, nf], -1)) + self.type_skip(nf * k)
        type_logits = type_logits.masked_fill(~b["type_mask"], NEG)

        ha = self.pair_proj(_gather(h, b["aspect_tok"]))  # (B, A, p)
        hf = self.pair_proj(hf)  # (B, N, p): pairs cost N^2, so they work in a small space
        N, A = hf.shape[1], ha.shape[1]
        fa, aa = hf[:, :, None].expand(-1, -1, A, -1), ha[:, None].expand(-1, N, -1, -1)
        pair_in = torch.cat([fa * aa, (fa - aa).abs(), b["demote_pair"]], -1)
        demote_logits = (self.demote_head(pair_in) + self.demote_skip(b["demote_pair"] * k)).squeeze(-1)
        demote_logits = demote_logits.masked_fill(~b["aspect_mask"][:, None, :], NEG)

        # Symmetric by construction: products and absolute differences of the two facts.
        gi, gj = hf[:, :, None].expand(-1, -1, N, -1), hf[:, None].expand(-1, N, -1, -1)
        group_in = torch.cat([gi * gj, (gi - gj).abs(), b["group_pair"]], -1)
        group_logits = (self.group_head(group_in) + self.group_skip(b["group_pair"] * k)).squeeze(-1)
        pair_ok = b["fact_mask"][:, :, None] & b["fact_mask"][:, None, :]
        pair_ok = pair_ok & ~torch.eye(N, dtype=torch.bool, device=pair_ok.device)[None]
        group_logits = group_logits.masked_fill(~pair_ok, NEG)
        return type_logits, demote_logits, group_logits


class OperationNet(nn.Module):
    """New item + its ``k`` candidate facts -> memory-operation logits (operation_student.py):
    ``[ADD, IGNORE, UPDATE_1..k, DELETE-keep_1..k, DELETE-drop_1..k]``.

    An item encoder (embedding and flags) gives the ADD and IGNORE logits; a pair scorer
    reads the item's hidden vector, the elementwise product of the item and a candidate
    (projected small) and the candidate's numeric features (the last one: 1 where the
    candidate is present), and gives its three logits. A missing candidate's are -inf.
    """

    def __init__(self, dim: int, k: int, n_flags: int, n_pair: int, hidden: int = 64):
        super().__init__()
        self.k = k
        self.item = nn.Sequential(nn.Linear(dim + n_flags, hidden), nn.ReLU())
        self.item_out = nn.Linear(hidden, 2)
        self.pair_in = nn.Linear(dim, 32)
        self.pair = nn.Sequential(nn.Linear(hidden + 32 + n_pair, hidden), nn.ReLU(), nn.Linear(hidden, 3))

    def forward(self, e: torch.Tensor, flags: torch.Tensor, cands: torch.Tensor,
                pairnum: torch.Tensor) -> torch.Tensor:
        """e (B, dim), flags (B, n_flags), cands (B, k, dim), pairnum (B, k, n_pair) ->
        logits (B, 2 + 3k)."""
        h = self.item(torch.cat([e, flags], dim=1))
        head = self.item_out(h)
        p = torch.relu(self.pair_in(cands * e[:, None, :]))
        z = self.pair(torch.cat([h[:, None, :].expand(-1, self.k, -1), p, pairnum], dim=2))  # (B, k, 3)
        z = z.masked_fill(pairnum[..., -1:] < 0.5, float("-inf"))
        return torch.cat([head, z[..., 0], z[..., 1], z[..., 2]], dim=1)


# ----------------------------------------------------------------------------- batching
def _pad(arrays: list, fill=0, dtype=torch.float32) -> torch.Tensor:
    """Stack numpy arrays of equal trailing shape, padding the first axis (and the second
    when both vary, e.g. pair matrices) with ``fill``."""
    shapes = [a.shape for a in arrays]
    out_shape = [len(arrays)] + [max(s[d] for s in shapes) for d in range(len(shapes[0]))]
    out = np.full(out_shape, fill, dtype=arrays[0].dtype if len(arrays) else np.float32)
    for i, a in enumerate(arrays):
        index: tuple[int | slice, ...] = (i,) + tuple(slice(0, n) for n in a.shape)
        out[index] = a
    return torch.as_tensor(out, dtype=dtype)


def collate_stage1(feats: list[ft.Stage1Features], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    if len(feats) == 1:
        return _single_stage1(feats[0], device)
    T = max(f.n_tokens for f in feats)
    cand = np.zeros((len(feats), T), bool)
    tok = np.zeros((len(feats), T), bool)
    for i, f in enumerate(feats):
        cand[i, 1:1 + f.n_candidates] = True
        tok[i, :f.n_tokens] = True
    b = {
        "text": _pad([np.concatenate([f.label, f.mean], axis=1) for f in feats]),
        "kind": _pad([f.kind for f in feats], dtype=torch.long),
        "role": _pad([f.role for f in feats], dtype=torch.long),
        "num": _pad([f.num for f in feats]),
        "cand_mask": torch.as_tensor(cand),
        "tok_mask": torch.as_tensor(tok),
    }
    return {k: v.to(device) for k, v in b.items()}


def _single_stage1(f: ft.Stage1Features, device: str | torch.device) -> dict[str, torch.Tensor]:
    """One example needs no padding: wrap its arrays directly (the insert's hot path)."""
    T = f.n_tokens
    cand = np.zeros((1, T), bool)
    cand[0, 1:1 + f.n_candidates] = True
    b = {
        "text": torch.from_numpy(np.concatenate([f.label, f.mean], axis=1).astype(np.float32, copy=False))[None],
        "kind": torch.from_numpy(f.kind)[None],
        "role": torch.from_numpy(f.role)[None],
        "num": torch.from_numpy(f.num.astype(np.float32, copy=False))[None],
        "cand_mask": torch.from_numpy(cand),
        "tok_mask": torch.ones((1, T), dtype=torch.bool),
    }
    return b if str(device) == "cpu" else {k: v.to(device) for k, v in b.items()}


def collate_stage2(feats: list[ft.Stage2Features], device: str | torch.device = "cpu") -> dict[str, torch.Tensor]:
    B = len(feats)
    T = max(len(f.node_ids) for f in feats)
    N = max(len(f.fact_tok) for f in feats)
    A = max(len(f.aspect_tok) for f in feats)
    tok = np.zeros((B, T), bool)
    fact_mask = np.zeros((B, N), bool)
    aspect_mask = np.zeros((B, A), bool)
    type_mask = np.zeros((B, N, 4), bool)
    type_mask[..., 0] = True  # padding facts: idle only, so their rows stay finite
    fact_tok = np.zeros((B, N), np.int64)
    aspect_tok = np.zeros((B, A), np.int64)
    demote = np.zeros((B, N, A, ft.DEMOTE_PAIR_NUM), np.float32)
    group = np.zeros((B, N, N, ft.GROUP_PAIR_NUM), np.float32)
    for i, f in enumerate(feats):
        n, a = len(f.fact_tok), len(f.aspect_tok)
        tok[i, :len(f.node_ids)] = True
        fact_mask[i, :n] = True
        aspect_mask[i, :a] = True
        type_mask[i, :n] = f.type_mask()
        fact_tok[i, :n] = f.fact_tok
        aspect_tok[i, :a] = f.aspect_tok
        demote[i, :n, :a] = f.demote_pair
        group[i, :n, :n] = f.group_pair
    b = {
        "text": _pad([np.concatenate([f.label, f.mean], axis=1) for f in feats]),
        "kind": _pad([f.kind for f in feats], dtype=torch.long),
        "role": _pad([f.role for f in feats], dtype=torch.long),
        "num": _pad([f.num for f in feats]),
        "tok_mask": torch.as_tensor(tok),
        "fact_mask": torch.as_tensor(fact_mask),
        "aspect_mask": torch.as_tensor(aspect_mask),
        "type_mask": torch.as_tensor(type_mask),
        "fact_tok": torch.as_tensor(fact_tok),
        "aspect_tok": torch.as_tensor(aspect_tok),
        "demote_pair": torch.as_tensor(demote),
        "group_pair": torch.as_tensor(group),
    }
    return {k: v.to(device) for k, v in b.items()}


@contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run torch on ``n`` CPU threads inside the block, then restore the calling thread's
    setting (``None`` leaves it alone).

    These networks are small enough that spreading one operation over threads costs more
    than it saves: on a 2-core VM a forward of either placement network took 4 to 6 times
    longer on two threads than on one (0.23 against 1.35 ms for stage 1), and a training
    batch no less wall time on one thread, at less CPU. torch keeps the count per thread,
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
