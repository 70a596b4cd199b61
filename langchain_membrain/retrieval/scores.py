"""Calibrated relevance: a hit's ``score`` is the estimated probability that it is relevant to
the query.

A small logistic model reads features of a hit that mean the same in every namespace, whatever
its size or the kinds it holds (:func:`hit_features`): the cosine of the hit's embedding with
the query's, the share of the query's content words the hit holds (stemmed, stop words out),
its rank in its namespace, the ranking score its namespace's index gave it
(``retrieval.relevance`` of it, bounded) and the size of the namespace. Its coefficients
(``data/relevance_model.json``) were fitted by ``python -m langchain_membrain.bench scores`` on
``data/relevance.json``, a labelled set written for this project (queries with the facts that
answer them, and queries nothing answers, in namespaces of 1 to 500 facts with the tuning
personas' facts around them); the bench prints its AUROC, what the threshold keeps and a
reliability table on a held-out split.

A search keeps its index's ranking (the fused score, every boost included) and reports the
model's probabilities made non-increasing down that ranking by isotonic regression
(:func:`non_increasing`: a run of hits that rise is given their mean, not cut), so no hit
scores above one ranked before it; across namespaces the lists are merged by score. A hit's
score depends on the hits its index ranked, not on ``limit`` beyond them. :data:`DEFAULT_MIN_SCORE` is the
threshold the agent tools use: below it, "nothing relevant".
"""

from __future__ import annotations

import contextvars
import json
import math
from contextlib import contextmanager
from functools import lru_cache
from importlib import resources
from typing import Any, Iterator, Sequence

import numpy as np

from ..index.lexical import shared_stemmer, tokenize

#: The threshold the agent tools' search uses (``search(..., min_score=...)``): a hit scoring
#: below it is probably not relevant to the query. Chosen on the tuning data alone (``bench
#: scores``, cross-fitted, and the tuning part of ``bench corrections``): the highest recall
#: at which unanswerable queries, in every tuning set, still come back empty at least 9 times
#: in 10. At 0.5 ("more likely relevant than not") a seventh of the answerable queries, and of
#: the corrections, lost their answer.
DEFAULT_MIN_SCORE = 0.3
MODEL_FILE = "relevance_model.json"
FEATURES = ("cosine", "overlap", "log_rank", "rank_relevance", "log_size", "cosine_x_overlap", "below_first")


def overlap(query: str, text: str) -> float:
    """Share of the query's content words (stemmed, stop words out) that ``text`` holds; 0
    for a query without one."""
    stemmer = shared_stemmer()
    words = set(tokenize(query, stemmer))
    if not words:
        return 0.0
    return len(words & set(tokenize(text, stemmer))) / len(words)


def hit_features(cosine: float, share: float, position: int, rank_score: float, size: int,
                 first_cosine: float) -> np.ndarray:
    """The model's inputs for one hit (:data:`FEATURES`): its cosine with the query, the
    :func:`overlap` share, its 0-based rank in its namespace, its ranking score, the number
    of facts its namespace's index holds, and how far its cosine is below the first hit's."""
    from ..index.facts import relevance

    return np.array([cosine, share, math.log1p(position), relevance(rank_score), math.log1p(size),
                     cosine * share, max(first_cosine - cosine, 0.0)], np.float64)


# The model put in place by use_model (None: the shipped one).
_USING: contextvars.ContextVar[tuple[np.ndarray, float] | None] = contextvars.ContextVar("membrain_scores",
                                                                                         default=None)


@contextmanager
def use_model(model: tuple[np.ndarray, float]) -> Iterator[None]:
    """Score with ``model`` (weights, bias) instead of the shipped one inside the block, in
    this thread (the bench's fitting and held-out runs)."""
    token = _USING.set(model)
    try:
        yield
    finally:
        _USING.reset(token)


def _model() -> tuple[np.ndarray, float]:
    model = _USING.get()
    return _shipped() if model is None else model


@lru_cache(maxsize=1)
def _shipped() -> tuple[np.ndarray, float]:
    data = json.loads(resources.files("langchain_membrain.data").joinpath(MODEL_FILE).read_text(encoding="utf-8"))
    if tuple(data["features"]) != FEATURES:
        raise ValueError(f"{MODEL_FILE} was fitted on other features: {data['features']}")
    return np.asarray(data["weights"], np.float64), float(data["bias"])


def probability(features: np.ndarray, model: tuple[np.ndarray, float] | None = None) -> float:
    """The fitted model's probability that a hit with these :func:`hit_features` is relevant."""
    weights, bias = _model() if model is None else model
    z = float(features @ weights) + bias
    return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0


def features(query: str, qvec: Any, hits: Sequence[tuple[str, float, Sequence[Any], Sequence[str]]],
             size: int) -> list[np.ndarray]:
    """:func:`hit_features` of one namespace's ranked hits (key, ranking score, embeddings,
    texts), best first; ``size``: the facts its index holds. A hit's embeddings and texts are
    its own, then those of the versions it superseded: a fact answers what its former
    versions answered ("I moved from Lisbon to Porto" is where the user lives), as its
    ranking score already counts them (index/facts.py, "Former versions"), so its cosine and
    overlap are the best over them."""
    from ..tree.placement import cosine

    cos = [max((cosine(vec, qvec) for vec in vecs if vec is not None), default=0.0) if qvec is not None else 0.0
           for _, _, vecs, _ in hits]
    return [hit_features(c, max((overlap(query, text) for text in texts), default=0.0), i, score, size, cos[0])
            for i, (c, (_, score, _, texts)) in enumerate(zip(cos, hits))]


def calibrated(query: str, qvec: Any, hits: Sequence[tuple[str, float, Sequence[Any], Sequence[str]]], size: int,
               model: tuple[np.ndarray, float] | None = None) -> list[float]:
    """The reported scores of one namespace's ranked hits (key, ranking score, embeddings,
    texts: :func:`features`), best first: each hit's :func:`probability`. A hit's score
    depends on the hits ranked above it only (the first one's cosine), not on how many are
    asked for."""
    return [probability(f, model) for f in features(query, qvec, hits, size)]


def non_increasing(values: Sequence[float]) -> list[float]:
    """The non-increasing sequence nearest to ``values`` in squared error (isotonic regression
    by pooling adjacent violators): each run that rises is replaced by its mean."""
    blocks: list[list[float]] = []  # [mean, count]
    for v in values:
        blocks.append([float(v), 1.0])
        while len(blocks) > 1 and blocks[-2][0] < blocks[-1][0]:
            mean, count = blocks.pop()
            prev = blocks[-1]
            prev[0] = (prev[0] * prev[1] + mean * count) / (prev[1] + count)
            prev[1] += count
    return [mean for mean, count in blocks for _ in range(int(count))]


def fit(x: np.ndarray, y: np.ndarray, *, l2: float = 1e-3, steps: int = 50) -> tuple[np.ndarray, float]:
    """Logistic regression of ``y`` (0/1) on ``x`` by Newton's method with a small L2
    penalty on the weights: (weights, bias)."""
    a = np.hstack([x, np.ones((len(x), 1))])
    w = np.zeros(a.shape[1])
    reg = np.full(a.shape[1], l2 * len(x))
    reg[-1] = 0.0
    for _ in range(steps):
        p = 1.0 / (1.0 + np.exp(-np.clip(a @ w, -50, 50)))
        grad = a.T @ (p - y) + reg * w
        hess = (a * (p * (1 - p))[:, None]).T @ a + np.diag(reg) + 1e-9 * np.eye(a.shape[1])
        step = np.linalg.solve(hess, grad)
        w -= step
        if float(np.abs(step).max()) < 1e-10:
            break
    return w[:-1], float(w[-1])


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float:
    """Area under the ROC curve: the chance that a relevant hit outscores an irrelevant
    one (ties count half)."""
    s, y = np.asarray(scores, np.float64), np.asarray(labels, bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return float("nan")
    order = np.argsort(np.concatenate([pos, neg]), kind="mergesort")
    ranks = np.empty(len(order))
    allv = np.concatenate([pos, neg])[order]
    i = 0
    while i < len(allv):  # average ranks over ties
        j = i
        while j + 1 < len(allv) and allv[j + 1] == allv[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return float((ranks[:len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))
