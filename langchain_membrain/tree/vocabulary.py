"""A vocabulary of topics that names aspects by what their facts share.

The package ships ``data/topic_vocabulary.txt``: a few hundred topics of personal and
working life ("food", "relatives", "travel", "exercise"), one per line, written for this
project. Definitions, for unit vectors (an embedder's, normalised):

- The **fit** of topic ``t`` to a group with mean embedding ``m`` within surroundings
  with mean embedding ``s`` is ``cos(t, m) - CONTEXT_WEIGHT * cos(t, s)``: how well the
  topic names the group, less how well it names everything around it, so that a topic
  near everything ("daily schedule") names no group in particular. Without surroundings
  the fit is ``cos(t, m)``.
- The **topic** of a group (:meth:`TopicVocabulary.topic`) is the topic of best fit among
  those whose cosine to the group reaches :data:`TOPIC_BAR` and that are not a label to
  avoid (an ancestor's, a sibling's): a group whose facts share no topic of the vocabulary
  (two facts about one hotel) has none, and keeps a name made of its own words
  (labels.offline_label).

The vocabulary is embedded once per embedder, at its first use (one ``embed`` call of a few
hundred short phrases), and nothing is downloaded.
"""

from __future__ import annotations

import threading
from functools import lru_cache
from importlib import resources
from typing import Callable, Iterable, Sequence

import numpy as np

#: How much a topic's cosine to the surroundings counts against it (see the module docstring).
CONTEXT_WEIGHT = 0.5
#: The lowest cosine between a topic and a group's mean embedding at which the topic names it.
TOPIC_BAR = 0.3


@lru_cache(maxsize=1)
def shipped_topics() -> tuple[str, ...]:
    """The topics of ``data/topic_vocabulary.txt``, in file order (comment lines, which
    start with ``#``, and blank lines left out)."""
    text = resources.files("langchain_membrain.data").joinpath("topic_vocabulary.txt").read_text(encoding="utf-8")
    lines = (line.strip() for line in text.splitlines())
    return tuple(dict.fromkeys(t for t in lines if t and not t.startswith("#")))


def _unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    norm = float(np.linalg.norm(v))
    return v / norm if norm > 0 else v


class TopicVocabulary:
    """Topics and their embeddings by ``embed`` (texts -> (n, dim) array), computed at the
    first :meth:`topic` and kept. Thread-safe.

    Parameters
    ----------
    embed : callable
        The memory's embedder (its label cache).
    topics : sequence of str, optional
        The topics; the shipped ones (:func:`shipped_topics`) by default.
    bar, context_weight : float
        :data:`TOPIC_BAR` and :data:`CONTEXT_WEIGHT`.
    """

    def __init__(self, embed: Callable[[list[str]], np.ndarray], topics: Sequence[str] | None = None, *,
                 bar: float = TOPIC_BAR, context_weight: float = CONTEXT_WEIGHT):
        self.embed = embed
        self.topics = tuple(shipped_topics() if topics is None else topics)
        self.bar, self.context_weight = float(bar), float(context_weight)
        self._vectors: np.ndarray | None = None
        self._lock = threading.Lock()

    def vectors(self) -> np.ndarray:
        """The topics' unit embeddings, (topics, dim)."""
        with self._lock:
            if self._vectors is None:
                v = np.asarray(self.embed(list(self.topics)), dtype=np.float64)
                norms = np.linalg.norm(v, axis=1, keepdims=True)
                self._vectors = v / np.where(norms > 0, norms, 1.0)
            return self._vectors

    def topic(self, mean: np.ndarray, *, context: np.ndarray | None = None, avoid: Iterable[str] = ()) -> str | None:
        """The topic of the group whose mean embedding is ``mean`` within surroundings of
        mean ``context`` (None: none), not one of ``avoid`` (casefolded); None when no
        such topic reaches the bar (module docstring)."""
        if not self.topics:
            return None
        vectors = self.vectors()
        m = _unit(mean)
        if m.shape[-1] != vectors.shape[1] or not np.any(m):
            return None
        cos = vectors @ m
        fit = cos if context is None or not np.any(context) else cos - self.context_weight * (vectors @ _unit(context))
        avoided = {a.casefold() for a in avoid}
        for i in np.argsort(-fit, kind="stable"):
            if cos[i] >= self.bar and self.topics[i].casefold() not in avoided:
                return self.topics[i]
        return None
