"""The networks, written once: their sizes, their layers and their forwards, without torch.

Each network is a list of :class:`Layer` (the state-dict names and sizes of its
parameters) and a forward over a few primitives (linear, layer norm, attention, GELU,
masking, ...) taken from ``op``: :data:`NUMPY` here, or models.py's ``TORCH``, whose
modules are built from the same layers and whose ``forward`` calls the same function
(training). A process that only places facts (``membrain add``, the first inserts of a
program) runs them from a loaded checkpoint or prior in numpy (:func:`stage1_logits`,
:func:`stage2_logits`, :func:`operation_logits`), so that it need not import torch (most of
such a process's start): float32 attention, LayerNorm and GELU with the erf
approximation of torch's CPU kernel, so the logits match torch's to float32 rounding
(``tests/test_nets.py`` checks every network on random weights and inputs).

Weights are a state dict of numpy arrays (``torchfile.load`` of a checkpoint).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..index.minilm import gelu_
from . import features as ft

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


# ------------------------------------------------------------------------ layers
@dataclass(frozen=True)
class Layer:
    """A layer with parameters, by its state-dict name: ``linear`` (``n_in`` -> ``n_out``,
    without bias when ``bias`` is False), ``embedding`` (``n_in`` ids, ``n_out`` wide) or
    ``layer_norm`` (``n_out`` wide). A network is the list of its layers (models.py builds
    its torch modules from it, in this order) and a forward below."""

    name: str
    kind: str
    n_in: int
    n_out: int
    bias: bool = True

    def shapes(self) -> dict[str, tuple[int, ...]]:
        if self.kind == "layer_norm":
            return {f"{self.name}.weight": (self.n_out,), f"{self.name}.bias": (self.n_out,)}
        if self.kind == "embedding":
            return {f"{self.name}.weight": (self.n_in, self.n_out)}
        out: dict[str, tuple[int, ...]] = {f"{self.name}.weight": (self.n_out, self.n_in)}
        if self.bias:
            out[f"{self.name}.bias"] = (self.n_out,)
        return out


def _linear(name: str, n_in: int, n_out: int, bias: bool = True) -> list[Layer]:
    return [Layer(name, "linear", n_in, n_out, bias)]


def _mlp_layers(name: str, n_in: int, hidden: int, n_out: int) -> list[Layer]:
    """``Sequential(Linear, activation, Linear)``: its linears are ``name.0`` and ``name.2``."""
    return _linear(f"{name}.0", n_in, hidden) + _linear(f"{name}.2", hidden, n_out)


def _encoder_layers(cfg: ModelConfig, n_num: int) -> list[Layer]:
    assert cfg.d_model % cfg.heads == 0, "d_model must be divisible by heads"
    d = cfg.d_model
    # One projection of [label, mean] (one matmul instead of two: inference latency).
    out = [*_linear("encoder.text", 2 * cfg.dim, d, bias=False), Layer("encoder.kind", "embedding", len(ft.KINDS), d),
           Layer("encoder.role", "embedding", len(ft.ROLES), d), *_linear("encoder.num", n_num, d)]
    for i in range(cfg.layers):
        b = f"encoder.blocks.{i}"
        out += [Layer(f"{b}.ln1", "layer_norm", d, d), *_linear(f"{b}.attn.qkv", d, 3 * d),
                *_linear(f"{b}.attn.proj", d, d), Layer(f"{b}.ln2", "layer_norm", d, d),
                *_mlp_layers(f"{b}.mlp", d, 4 * d, d)]
    return out + [Layer("encoder.ln_f", "layer_norm", d, d)]


def stage1_layers(cfg: ModelConfig) -> list[Layer]:
    return [*_encoder_layers(cfg, cfg.stage1_num), *_linear("head", cfg.d_model, 1), *_linear("skip", cfg.stage1_num, 1)]


def stage2_layers(cfg: ModelConfig) -> list[Layer]:
    d, p = cfg.d_model, cfg.pair_dim
    return [*_encoder_layers(cfg, cfg.stage2_num), *_mlp_layers("type_head", d + cfg.stage2_num, d, 4),
            *_linear("type_skip", cfg.stage2_num, 4), *_linear("pair_proj", d, p),
            *_mlp_layers("demote_head", 2 * p + cfg.demote_pair_num, p, 1),
            *_linear("demote_skip", cfg.demote_pair_num, 1),
            *_mlp_layers("group_head", 2 * p + cfg.group_pair_num, p, 1), *_linear("group_skip", cfg.group_pair_num, 1)]


def operation_layers(dim: int, k: int, n_flags: int, n_pair: int, hidden: int = 64) -> list[Layer]:
    """``k`` (the candidates) sizes no layer: the pair scorer is shared by them."""
    return [*_linear("item.0", dim + n_flags, hidden), *_linear("item_out", hidden, 2), *_linear("pair_in", dim, 32),
            *_mlp_layers("pair", hidden + 32 + n_pair, hidden, 3)]


def _shapes(layers: list[Layer]) -> dict[str, tuple[int, ...]]:
    return {name: shape for layer in layers for name, shape in layer.shapes().items()}


def parameter_shapes(cfg: ModelConfig, stage: str) -> dict[str, tuple[int, ...]]:
    """The state-dict entries (name -> shape) of ``Stage1Net(cfg)`` (``stage="stage1"``)
    or ``Stage2Net(cfg)``, in their order: what a checkpoint read without torch must hold."""
    if stage not in ("stage1", "stage2"):
        raise ValueError(f"stage1 or stage2, not {stage!r}")
    return _shapes(stage1_layers(cfg) if stage == "stage1" else stage2_layers(cfg))


def operation_shapes(dim: int, k: int, n_flags: int, n_pair: int, hidden: int = 64) -> dict[str, tuple[int, ...]]:
    """The state-dict entries of ``OperationNet(dim, k, n_flags, n_pair, hidden)``."""
    return _shapes(operation_layers(dim, k, n_flags, n_pair, hidden))


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


# ------------------------------------------------------------------- primitives
class NumpyOps:
    """The primitives the forwards below are written in, in numpy and float32 (models.py's
    ``TorchOps`` are the same in torch). The element-wise ones may overwrite their input:
    the forwards pass them fresh arrays."""

    @staticmethod
    def linear(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None) -> np.ndarray:
        y = x @ w.T
        if b is not None:
            y += b
        return y

    embed = staticmethod(lambda w, idx: w[idx])
    dropout = staticmethod(lambda x, p: x)  # inference only
    cat = staticmethod(np.concatenate)
    masked_fill = staticmethod(lambda x, mask, value: np.where(mask, _F(value), x))
    eye = staticmethod(lambda n, like: np.eye(n, dtype=bool))

    @staticmethod
    def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = 1e-5) -> np.ndarray:
        d = x - x.mean(-1, keepdims=True)
        var = np.square(d).mean(-1, keepdims=True)
        d /= np.sqrt(var + _F(eps))
        d *= w
        d += b
        return d

    gelu = staticmethod(gelu_)

    relu = staticmethod(lambda x: np.maximum(x, _F(0.0), out=x))

    @staticmethod
    def attention(qkv: np.ndarray, tok_mask: np.ndarray, heads: int, drop: float) -> np.ndarray:
        """Multi-head attention of ``qkv`` (B, T, 3C) over the keys of ``tok_mask`` (B, T)."""
        B, T, C3 = qkv.shape
        C = C3 // 3
        hd = C // heads
        qkv = qkv.reshape(B, T, 3, heads, hd)
        q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3))  # (B, H, T, hd)
        k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))  # (B, H, hd, T)
        v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
        s = q @ k
        s *= _F(1.0 / np.sqrt(hd))
        if not tok_mask.all():
            s = np.where(tok_mask[:, None, None, :], s, _F(-np.inf))
        s -= s.max(-1, keepdims=True)
        np.exp(s, out=s)
        s /= s.sum(-1, keepdims=True)
        return (s @ v).transpose(0, 2, 1, 3).reshape(B, T, C)

    @staticmethod
    def gather(h: np.ndarray, idx: np.ndarray) -> np.ndarray:
        """Rows of ``h`` (B, T, C) at token indices ``idx`` (B, N) -> (B, N, C)."""
        return h[np.arange(len(idx))[:, None], idx]

    @staticmethod
    def expand(x: np.ndarray, *sizes: int) -> np.ndarray:
        return np.broadcast_to(x, tuple(n if s == -1 else s for n, s in zip(x.shape, sizes)))


NUMPY = NumpyOps()


# --------------------------------------------------------------------- forwards
# Each network's forward, written once over ``op`` (NUMPY, or models.TORCH: the modules'
# ``forward`` and training) and its parameters ``w`` by state-dict name, on a batch (the
# arrays of :func:`stage1_batch` and :func:`stage2_batch`: tokens padded to the widest
# example, ``tok_mask`` True on real tokens). Impossible options get :data:`NEG` instead
# of their logit, so softmax gives them ~0 and argmax never picks them. ``drop`` is the
# dropout rate (training only).
def _lin(op: Any, w: Mapping[str, Any], name: str, x: Any) -> Any:
    return op.linear(x, w[f"{name}.weight"], w.get(f"{name}.bias"))


def _ln(op: Any, w: Mapping[str, Any], name: str, x: Any) -> Any:
    return op.layer_norm(x, w[f"{name}.weight"], w[f"{name}.bias"])


def _mlp(op: Any, w: Mapping[str, Any], name: str, x: Any, act: str = "gelu") -> Any:
    """``Sequential(Linear, GELU or ReLU, Linear)`` (named ``name.0`` and ``name.2``)."""
    return _lin(op, w, f"{name}.2", getattr(op, act)(_lin(op, w, f"{name}.0", x)))


def encode(op: Any, w: Mapping[str, Any], cfg: ModelConfig, b: Mapping[str, Any], drop: float = 0.0) -> Any:
    """The token encoder: token embedding (label and mean text embeddings, kind, role,
    numeric features), pre-norm transformer blocks (no positional encoding: a subtree or
    closure is a set, and the role and kind ids say what each token is; padding is never
    attended), then a final LayerNorm: (B, T, d_model)."""
    x = (_lin(op, w, "encoder.text", b["text"]) + op.embed(w["encoder.kind.weight"], b["kind"])
         + op.embed(w["encoder.role.weight"], b["role"]) + _lin(op, w, "encoder.num", b["num"]))
    for i in range(cfg.layers):
        blk = f"encoder.blocks.{i}"
        y = op.attention(_lin(op, w, f"{blk}.attn.qkv", _ln(op, w, f"{blk}.ln1", x)), b["tok_mask"], cfg.heads, drop)
        x = x + _lin(op, w, f"{blk}.attn.proj", y)
        x = x + op.dropout(_mlp(op, w, f"{blk}.mlp", _ln(op, w, f"{blk}.ln2", x)), drop)
    return _ln(op, w, "encoder.ln_f", x)


def stage1_forward(op: Any, w: Mapping[str, Any], cfg: ModelConfig, b: Mapping[str, Any], drop: float = 0.0) -> Any:
    """``Stage1Net``: (B, T) logits; tokens off ``cand_mask`` (the current node and its
    child aspects) hold :data:`NEG`.

    logit = head(encoder(tokens)) + skip(num * skip_scale). The skip path is a linear read
    of the features: a teacher's rule is often a threshold on a similarity, with decisions
    a hundredth apart, so it needs large weights; the scale (and the higher learning rate
    the trainer gives ``*skip*`` parameters) gets there in few steps.
    """
    h = encode(op, w, cfg, b, drop)
    logits = (_lin(op, w, "head", h) + _lin(op, w, "skip", b["num"] * cfg.skip_scale)).squeeze(-1)
    return op.masked_fill(logits, ~b["cand_mask"], NEG)


def stage2_forward(op: Any, w: Mapping[str, Any], cfg: ModelConfig, b: Mapping[str, Any], drop: float = 0.0) -> tuple[Any, Any, Any]:
    """``Stage2Net``: type (B, N, 4), demote (B, N, A) and group (B, N, N) logits.

    Facts are the actable facts (the focal fact and its sibling facts), aspects the sibling
    aspects (Demote targets). Masks in the batch: ``type_mask`` (B, N, 4) possible action
    types, ``aspect_mask`` (B, A) real aspects, ``fact_mask`` (B, N) real facts.
    """
    h = encode(op, w, cfg, b, drop)
    hf = op.gather(h, b["fact_tok"])  # (B, N, d)
    nf = op.gather(b["num"], b["fact_tok"])
    k = cfg.skip_scale
    types = _mlp(op, w, "type_head", op.cat([hf, nf], -1)) + _lin(op, w, "type_skip", nf * k)
    types = op.masked_fill(types, ~b["type_mask"], NEG)

    ha = _lin(op, w, "pair_proj", op.gather(h, b["aspect_tok"]))  # (B, A, p)
    hf = _lin(op, w, "pair_proj", hf)  # (B, N, p): pairs cost N^2, so they work in a small space
    N, A = hf.shape[1], ha.shape[1]
    fa, aa = op.expand(hf[:, :, None], -1, -1, A, -1), op.expand(ha[:, None], -1, N, -1, -1)
    pair_in = op.cat([fa * aa, abs(fa - aa), b["demote_pair"]], -1)
    demote = (_mlp(op, w, "demote_head", pair_in) + _lin(op, w, "demote_skip", b["demote_pair"] * k)).squeeze(-1)
    demote = op.masked_fill(demote, ~b["aspect_mask"][:, None, :], NEG)

    # Symmetric by construction: products and absolute differences of the two facts.
    gi, gj = op.expand(hf[:, :, None], -1, -1, N, -1), op.expand(hf[:, None], -1, N, -1, -1)
    group_in = op.cat([gi * gj, abs(gi - gj), b["group_pair"]], -1)
    group = (_mlp(op, w, "group_head", group_in) + _lin(op, w, "group_skip", b["group_pair"] * k)).squeeze(-1)
    pair_ok = b["fact_mask"][:, :, None] & b["fact_mask"][:, None, :]
    pair_ok = pair_ok & ~op.eye(N, pair_ok)[None]
    return types, demote, op.masked_fill(group, ~pair_ok, NEG)


def operation_forward(op: Any, w: Mapping[str, Any], e: Any, flags: Any, cands: Any, pairnum: Any) -> Any:
    """``OperationNet``: e (B, dim), flags (B, n_flags), cands (B, k, dim), pairnum
    (B, k, n_pair) -> logits (B, 2 + 3k), -inf where a candidate is missing."""
    h = op.relu(_lin(op, w, "item.0", op.cat([e, flags], 1)))
    head = _lin(op, w, "item_out", h)
    p = op.relu(_lin(op, w, "pair_in", cands * e[:, None, :]))
    z = _mlp(op, w, "pair", op.cat([op.expand(h[:, None, :], -1, cands.shape[1], -1), p, pairnum], 2), "relu")
    z = op.masked_fill(z, pairnum[..., -1:] < 0.5, float("-inf"))  # (B, k, 3)
    return op.cat([head, z[..., 0], z[..., 1], z[..., 2]], 1)


# ---------------------------------------------------------------------- batches
def _pad(arrays: list, fill: Any = 0, dtype: Any = _F) -> np.ndarray:
    """Stack arrays of equal trailing shape, padding the first axis (and the second when
    both vary, e.g. pair matrices) with ``fill``."""
    shapes = [a.shape for a in arrays]
    out = np.full([len(arrays)] + [max(s[d] for s in shapes) for d in range(len(shapes[0]))], fill, dtype=dtype)
    for i, a in enumerate(arrays):
        index: tuple[int | slice, ...] = (i, *(slice(0, n) for n in a.shape))
        out[index] = a
    return out


def _text(f: ft.Stage1Features | ft.Stage2Features) -> np.ndarray:
    return np.concatenate([f.label, f.mean], axis=1)


def _tokens(feats: Sequence[ft.Stage1Features] | Sequence[ft.Stage2Features]) -> dict[str, np.ndarray]:
    return {"text": _pad([_text(f) for f in feats]), "kind": _pad([f.kind for f in feats], dtype=np.int64),
            "role": _pad([f.role for f in feats], dtype=np.int64), "num": _pad([f.num for f in feats])}


def stage1_batch(feats: Sequence[ft.Stage1Features]) -> dict[str, np.ndarray]:
    """The batch of :func:`stage1_forward` (and ``Stage1Net``) of these examples."""
    if len(feats) == 1:  # no padding: the example's own arrays (the insert's hot path)
        f = feats[0]
        cand = np.zeros((1, f.n_tokens), bool)
        cand[0, 1:1 + f.n_candidates] = True
        return {"text": _text(f).astype(_F, copy=False)[None], "kind": f.kind[None], "role": f.role[None],
                "num": f.num.astype(_F, copy=False)[None], "cand_mask": cand, "tok_mask": np.ones((1, f.n_tokens), bool)}
    T = max(f.n_tokens for f in feats)
    cand = np.zeros((len(feats), T), bool)
    tok = np.zeros((len(feats), T), bool)
    for i, f in enumerate(feats):
        cand[i, 1:1 + f.n_candidates] = True
        tok[i, :f.n_tokens] = True
    return {**_tokens(feats), "cand_mask": cand, "tok_mask": tok}


def stage2_batch(feats: Sequence[ft.Stage2Features]) -> dict[str, np.ndarray]:
    """The batch of :func:`stage2_forward` (and ``Stage2Net``) of these closures."""
    if len(feats) == 1:  # no padding: the closure's own arrays (the insert's hot path)
        f = feats[0]
        n, a = len(f.fact_tok), len(f.aspect_tok)
        return {"text": _text(f).astype(_F, copy=False)[None], "kind": f.kind[None], "role": f.role[None],
                "num": f.num.astype(_F, copy=False)[None], "tok_mask": np.ones((1, len(f.node_ids)), bool),
                "fact_mask": np.ones((1, n), bool), "aspect_mask": np.ones((1, a), bool),
                "type_mask": f.type_mask()[None], "fact_tok": np.asarray(f.fact_tok, np.int64)[None],
                "aspect_tok": np.asarray(f.aspect_tok, np.int64)[None],
                "demote_pair": np.asarray(f.demote_pair, _F).reshape(1, n, a, ft.DEMOTE_PAIR_NUM),
                "group_pair": np.asarray(f.group_pair, _F).reshape(1, n, n, ft.GROUP_PAIR_NUM)}
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
    demote = np.zeros((B, N, A, ft.DEMOTE_PAIR_NUM), _F)
    group = np.zeros((B, N, N, ft.GROUP_PAIR_NUM), _F)
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
    return {**_tokens(feats), "tok_mask": tok, "fact_mask": fact_mask, "aspect_mask": aspect_mask,
            "type_mask": type_mask, "fact_tok": fact_tok, "aspect_tok": aspect_tok, "demote_pair": demote,
            "group_pair": group}


# -------------------------------------------------------------- numpy inference
def stage1_logits(w: Weights, cfg: ModelConfig, f: ft.Stage1Features) -> np.ndarray:
    """``Stage1Net`` on one example, in numpy: (T,) logits, :data:`NEG` off the candidates."""
    return stage1_forward(NUMPY, w, cfg, stage1_batch([f]))[0]


def stage2_logits(w: Weights, cfg: ModelConfig, f: ft.Stage2Features) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``Stage2Net`` on one closure, in numpy: type (N, 4), demote (N, A) and group (N, N) logits."""
    types, demote, group = stage2_forward(NUMPY, w, cfg, stage2_batch([f]))
    return types[0], demote[0], group[0]


def operation_logits(w: Weights, e: np.ndarray, flags: np.ndarray, cands: np.ndarray,
                     pairnum: np.ndarray) -> np.ndarray:
    """``OperationNet`` on one item (e (dim,), flags, cands (k, dim), pairnum (k, n_pair)),
    in numpy: logits (2 + 3k,), -inf where a candidate is missing."""
    return operation_forward(NUMPY, w, *(np.asarray(x, _F)[None] for x in (e, flags, cands, pairnum)))[0]


__all__ = ["NEG", "NUMPY", "Layer", "ModelConfig", "check_optimiser_state", "check_weights", "encode",
           "operation_forward", "operation_layers", "operation_logits", "operation_shapes", "parameter_shapes",
           "stage1_batch", "stage1_forward", "stage1_layers", "stage1_logits", "stage2_batch", "stage2_forward",
           "stage2_layers", "stage2_logits"]
