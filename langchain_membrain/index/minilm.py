"""all-MiniLM-L6-v2 in numpy: the bundled encoder without torch, transformers or
sentence-transformers.

Importing sentence-transformers (and with it torch, transformers and scikit-learn) would be
most of a ``membrain search`` for one query. This module runs the
same network (a 6-layer BERT, mean pooling over the tokens, unit normalisation: the model's
``modules.json``) from its ``model.safetensors`` with numpy, and tokenises with
``tokenizers`` from its ``tokenizer.json``, truncating at the model's ``max_seq_length``
(256), as sentence-transformers does. Its vectors differ from sentence-transformers' by
at most about 2e-7 per component (float32 rounding; GELU uses the erf approximation of
torch's CPU kernels), as much as sentence-transformers' own vectors differ between batch
compositions. ``tests/test_minilm.py`` checks both when sentence-transformers is installed.

:func:`load` returns None when the bundled model is not this architecture (then the
caller falls back to sentence-transformers).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
from pathlib import Path
from typing import Any, Iterator

import numpy as np

_F = np.float32


def gelu_(x: np.ndarray) -> np.ndarray:
    """GELU (erf form) of a float32 array, computed in place (``x`` is overwritten and
    returned). erf is Abramowitz and Stegun 7.1.26 (absolute error below 1.5e-7), the
    approximation torch's vectorised CPU kernel uses, so the result matches
    ``torch.nn.functional.gelu`` to float32 rounding."""
    z = x * _F(0.7071067811865476)
    t = np.abs(z)
    t *= _F(0.3275911)
    t += _F(1.0)
    np.reciprocal(t, out=t)
    r = t * _F(1.061405429)
    r -= _F(1.453152027)
    r *= t
    r += _F(1.421413741)
    r *= t
    r -= _F(0.284496736)
    r *= t
    r += _F(0.254829592)
    r *= t
    np.square(z, out=t)
    np.negative(t, out=t)
    np.exp(t, out=t)
    r *= t  # 1 - erf(|z|)
    np.subtract(_F(1.0), r, out=r)
    np.copysign(r, z, out=r)  # erf(z)
    r += _F(1.0)
    r *= x
    r *= _F(0.5)
    x[...] = r
    return x


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    mu = x.mean(-1, keepdims=True)
    d = x - mu
    var = np.square(d).mean(-1, keepdims=True)
    d /= np.sqrt(var + _F(eps))
    d *= weight
    d += bias
    return d


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """numpy's BLAS on ``n`` threads inside the block (None: as it is). OpenBLAS spreading
    these small matrix products over the threads of a busy machine makes an encode slower
    than on one thread; threadpoolctl sets and restores it."""
    controller = _controller() if n is not None else None
    if controller is None:
        yield
        return
    with controller.limit(limits=n, user_api="blas"):
        yield


@functools.lru_cache(maxsize=1)
def _controller() -> Any:
    """threadpoolctl's view of the loaded BLAS, made once (making one scans the loaded
    libraries: about a millisecond, against 10 microseconds to use it)."""
    try:
        from threadpoolctl import ThreadpoolController
    except ImportError:  # pragma: no cover - installed with the package
        return None
    return ThreadpoolController()


class NumpyMiniLM:
    """The bundled sentence encoder (see the module docstring); ``encode`` as
    ``SentenceTransformer.encode(texts, batch_size, normalize_embeddings=True)``."""

    def __init__(self, path: str | Path, *, threads: int | None = 1):
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        path = Path(path)
        config = json.loads((path / "config.json").read_text(encoding="utf-8"))
        self.heads = int(config["num_attention_heads"])
        self.eps = float(config["layer_norm_eps"])
        self.threads = threads
        st = json.loads((path / "sentence_bert_config.json").read_text(encoding="utf-8"))
        self.max_seq_length = int(st["max_seq_length"])
        w = load_file(str(path / "model.safetensors"))
        self.word = w["embeddings.word_embeddings.weight"]
        self.position = w["embeddings.position_embeddings.weight"]
        self.token_type = w["embeddings.token_type_embeddings.weight"][0]  # one segment
        self.ln = (w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"])
        self.layers = []
        for i in range(int(config["num_hidden_layers"])):
            g = lambda name: w[f"encoder.layer.{i}.{name}"]  # noqa: E731
            qkv = np.concatenate([g(f"attention.self.{p}.weight") for p in ("query", "key", "value")])
            self.layers.append((
                np.ascontiguousarray(qkv.T),
                np.concatenate([g(f"attention.self.{p}.bias") for p in ("query", "key", "value")]),
                np.ascontiguousarray(g("attention.output.dense.weight").T), g("attention.output.dense.bias"),
                (g("attention.output.LayerNorm.weight"), g("attention.output.LayerNorm.bias")),
                np.ascontiguousarray(g("intermediate.dense.weight").T), g("intermediate.dense.bias"),
                np.ascontiguousarray(g("output.dense.weight").T), g("output.dense.bias"),
                (g("output.LayerNorm.weight"), g("output.LayerNorm.bias")),
            ))
        self.dim = int(self.word.shape[1])
        self.tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
        self.tokenizer.enable_truncation(max_length=self.max_seq_length)
        self.tokenizer.no_padding()

    def forward(self, ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        """Unit-normalised mean-pooled embeddings (B, dim) of token ids (B, T) padded
        on the right (``mask`` 1.0 on real tokens)."""
        B, T = ids.shape
        C, H = self.dim, self.heads
        d = C // H
        x = self.word[ids]
        x += self.position[:T]
        x += self.token_type
        x = layer_norm(x, *self.ln, self.eps).reshape(B * T, C)
        # Padding keys get the float32 minimum added, as transformers' attention mask does.
        neg = ((1.0 - mask) * np.finfo(_F).min).astype(_F)[:, None, None, :]
        scale = _F(1.0 / math.sqrt(d))
        for qkv_w, qkv_b, o_w, o_b, ln1, i_w, i_b, f_w, f_b, ln2 in self.layers:
            qkv = (x @ qkv_w + qkv_b).reshape(B, T, 3, H, d)
            q = np.ascontiguousarray(qkv[:, :, 0].transpose(0, 2, 1, 3))
            k = np.ascontiguousarray(qkv[:, :, 1].transpose(0, 2, 3, 1))
            v = np.ascontiguousarray(qkv[:, :, 2].transpose(0, 2, 1, 3))
            s = q @ k
            s *= scale
            s += neg
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            ctx = (s @ v).transpose(0, 2, 1, 3).reshape(B * T, C)
            a = ctx @ o_w
            a += o_b
            a += x
            x = layer_norm(a, *ln1, self.eps)
            h = x @ i_w
            h += i_b
            f = gelu_(h) @ f_w
            f += f_b
            f += x
            x = layer_norm(f, *ln2, self.eps)
        x = x.reshape(B, T, C)
        m = mask[..., None]
        e = (x * m).sum(1) / np.maximum(m.sum(1), _F(1e-9))
        return e / np.maximum(np.linalg.norm(e, axis=1, keepdims=True), _F(1e-12))

    def encode(self, texts: list[str], batch_size: int = 8, **_: Any) -> np.ndarray:
        """(n, dim) float32. Longest texts first, in batches of ``batch_size`` padded to
        their longest (as sentence-transformers batches)."""
        out = np.zeros((len(texts), self.dim), _F)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        with blas_threads(self.threads):
            for start in range(0, len(texts), max(int(batch_size), 1)):
                idx = order[start:start + max(int(batch_size), 1)]
                encs = self.tokenizer.encode_batch([texts[i] for i in idx])
                T = max(len(e.ids) for e in encs)
                ids = np.zeros((len(idx), T), np.int64)
                mask = np.zeros((len(idx), T), _F)
                for r, e in enumerate(encs):
                    ids[r, :len(e.ids)] = e.ids
                    mask[r, :len(e.ids)] = 1.0
                out[idx] = self.forward(ids, mask)
        return out


def fits(path: str | Path) -> bool:
    """Whether the model at ``path`` is what :class:`NumpyMiniLM` computes: a BERT
    followed by mean pooling and normalisation."""
    path = Path(path)
    try:
        modules = [m["type"].rsplit(".", 1)[-1] for m in json.loads((path / "modules.json").read_text("utf-8"))]
        pooling = json.loads((path / "1_Pooling" / "config.json").read_text("utf-8"))
        config = json.loads((path / "config.json").read_text("utf-8"))
    except (OSError, ValueError, KeyError, TypeError):
        return False
    modes = {k: v for k, v in pooling.items() if k.startswith("pooling_mode")}
    return (modules == ["Transformer", "Pooling", "Normalize"] and config.get("model_type") == "bert"
            and config.get("hidden_act") == "gelu" and config.get("position_embedding_type", "absolute") == "absolute"
            and modes.get("pooling_mode_mean_tokens") is True and sum(bool(v) for v in modes.values()) == 1
            and (path / "model.safetensors").is_file() and (path / "tokenizer.json").is_file())


def load(path: str | Path, *, threads: int | None = 1) -> NumpyMiniLM | None:
    """The numpy encoder of the model at ``path``, or None when it is another architecture
    or ``tokenizers``/``safetensors`` are missing."""
    if not fits(path):
        return None
    try:
        return NumpyMiniLM(path, threads=threads)
    except ImportError:
        return None
