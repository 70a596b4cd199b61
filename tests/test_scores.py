"""One score scale: a hit's score is its calibrated relevance in [0, 1] (scores.py: the
probability that it is relevant), the same from ``MembrainMemory.search``,
``MembrainStore.search`` and the retriever, whether one namespace or several are searched.

It used to differ: the same fact scored 1.636 for "dog" inside its namespace and 0.438 across
namespaces (a plain cosine then), and the store gave values down to -0.2. The embeddings are
the instant bag-of-words ones of helpers.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import WordEmbeddings

from langchain_membrain import MembrainMemory, MembrainRetriever, MembrainStore
from langchain_membrain.index.config import RetrievalConfig
from langchain_membrain.index.facts import FactIndex, relevance
from langchain_membrain.retrieval.scores import calibrated, non_increasing

NS_A, NS_B = ("u", "a"), ("u", "b")
FACTS = {
    NS_A: {"rex": "I have a dog named Rex", "nurse": "I work as a nurse in Leeds",
           "sushi": "My favourite food is sushi", "guitar": "I play the guitar on weekends",
           "paris": "My sister lives in Paris"},
    NS_B: {"stand": "The hot dog stand closed", "van": "I drive a red van", "cat": "My cat sleeps all day",
           "rex": "I have a dog named Rex"},
}
QUERIES = ["dog", "where does my sister live", "red van", "what food do I like"]


@pytest.fixture(scope="module")
def mem():
    # The index's order, as calibrated: no newer statement placed before an older one
    # (supersession is test_corrections.py's).
    with MembrainMemory(embeddings=WordEmbeddings(), background=False, prior=False, relabel=False,
                        retrieval=RetrievalConfig(supersession=False)) as memory:
        for ns, facts in FACTS.items():
            for key, text in facts.items():
                memory.put(ns, key, {"content": text})
        yield memory


def best_first(scores: list[float]) -> bool:
    return all(0.0 <= s <= 1.0 for s in scores) and scores == sorted(scores, reverse=True)


def in_range(scores: list[float]) -> bool:
    return all(0.0 <= s <= 1.0 for s in scores)


@pytest.mark.parametrize("query", QUERIES)
def test_one_fact_one_score_from_every_entry_point_and_across_namespaces(mem, query):
    store = MembrainStore(mem)
    per_entry: dict[str, dict[tuple, float]] = {
        "memory, its namespace": {(r.namespace, r.key): r.score for ns in FACTS
                                  for r in mem.search(query, namespace=ns, exact_namespace=True, limit=10)},
        "memory, every namespace": {(r.namespace, r.key): r.score for r in mem.search(query, limit=20)},
        "memory, the prefix": {(r.namespace, r.key): r.score for r in mem.search(query, namespace="u", limit=20)},
        "store, its namespace": {(h.namespace, h.key): h.score for ns in FACTS
                                 for h in store.search(ns, query=query, limit=10)},
        "store, the prefix": {(h.namespace, h.key): h.score for h in store.search(("u",), query=query, limit=20)},
        "retriever": {(tuple(d.metadata["namespace"]), d.metadata["key"]): d.metadata["score"]
                      for d in MembrainRetriever(memory=mem, namespace="u", k=20).invoke(query)},
    }
    reference = per_entry["memory, its namespace"]
    assert len(reference) == sum(len(f) for f in FACTS.values())
    for entry, scores in per_entry.items():
        assert all(0.0 <= s <= 1.0 for s in scores.values()), entry
        assert scores == pytest.approx(reference, abs=1e-12), entry
    # each namespace's hits keep their order when namespaces are merged
    for ns in FACTS:
        alone = [r.key for r in mem.search(query, namespace=ns, exact_namespace=True, limit=10)]
        assert [r.key for r in mem.search(query, limit=20) if r.namespace == ns] == alone
    if query == "dog":  # the fact that answers it stands out on the scale, in each namespace
        assert reference[NS_A, "rex"] == max(s for (ns, k), s in reference.items() if ns == NS_A)
        assert reference[NS_B, "rex"] > max(s for (ns, k), s in reference.items() if k not in ("rex", "stand"))


def test_hits_keep_the_index_order_and_score_their_calibrated_relevance(mem):
    """Within a namespace the hits come in the order the namespace's index ranks them, each
    scored by scores.calibrated over that ranking (a FactIndex over the same facts), made
    non-increasing down it."""
    emb = WordEmbeddings()
    for ns, facts in FACTS.items():
        index = FactIndex(mem.retrieval)
        for key, text in facts.items():
            index.add(key, text, emb.embed_query(text), metadata={"content": text})
        for query in QUERIES:
            qvec = np.asarray(emb.embed_query(index.dense_query_text(query)), np.float32)
            ranked = index.search(query, qvec, 10, tree=mem.tree(ns), mode=mem.search_mode)
            hits = mem.search(query, namespace=ns, exact_namespace=True, limit=10)
            want = calibrated(query, qvec, [(k, s, [np.asarray(emb.embed_query(facts[k]), np.float32)], [facts[k]])
                                            for k, s in ranked], len(index))
            # the same order (facts tied on the index's score may come in either order)
            assert {r.key: r.score for r in hits} == pytest.approx(dict(zip([k for k, _ in ranked],
                                                                            non_increasing(want))), abs=1e-6)
            assert best_first([r.score for r in hits])


def test_relevance_is_a_bounded_increasing_function():
    xs = [-1e300, -800.0, -5.0, -1.0, -0.2, 0.0, 0.25, 0.5, 1.0, 1.5, 3.0, 8.0, 1e300]
    rs = [relevance(x) for x in xs]
    assert all(0.0 <= r <= 1.0 for r in rs) and rs == sorted(rs)
    assert all(a < b for a, b in zip(rs[2:-3], rs[3:-2]))  # strictly where doubles tell them apart
    assert relevance(0.5) == 0.5 and rs[0] == 0.0 and rs[-1] == 1.0
    assert relevance(1.0) == pytest.approx(1 / (1 + math.exp(-2.0)))


def test_history_search_scores_stay_in_range(mem):
    """With ``include_history`` current and archived versions rank by their plain cosine,
    reported clipped to [0, 1]."""
    mem.put(NS_B, "old", {"content": "I used to drive a blue van"})
    assert mem.delete("old", namespace=NS_B)
    hits = mem.search("van", namespace=NS_B, include_history=True, limit=10)
    assert {r.status for r in hits} == {"current", "deleted"}
    assert best_first([r.score for r in hits])


def test_non_increasing_pools_a_rising_run_into_its_mean():
    assert non_increasing([0.72, 0.01, 0.28, 0.16, 0.61]) == pytest.approx([0.72, 0.265, 0.265, 0.265, 0.265])
    assert non_increasing([0.9, 0.5, 0.1]) == [0.9, 0.5, 0.1]
    assert non_increasing([0.1, 0.9]) == [0.5, 0.5] and non_increasing([]) == []
