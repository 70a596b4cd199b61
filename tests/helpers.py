"""Small real collaborators shared by the tests (no mocks of our own classes)."""

from __future__ import annotations

import zlib

import numpy as np
from langchain_core.embeddings import Embeddings


class WordEmbeddings(Embeddings):
    """Bag of words hashed into 64 buckets: texts sharing words are similar. Instant."""

    dimensions = 64

    def _vec(self, text: str) -> list[float]:
        v = np.zeros(self.dimensions)
        for word in text.lower().replace("?", " ").replace(".", " ").replace(",", " ").split():
            v[zlib.crc32(word.encode()) % self.dimensions] += 1.0
        n = np.linalg.norm(v)
        return (v / n if n else v).tolist()

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        return [self._vec(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)
