"""Calibrated relevance as a user meets it (issue 47): a score says how likely a hit is to be
relevant, ``min_score`` drops what is probably not, and the agent tools answer "nothing
relevant" with an empty list. MiniLM embeddings (the default)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from langchain_membrain import InvalidOperationError, MembrainMemory, MembrainStore
from langchain_membrain.integrations.tools import memory_tools
from langchain_membrain.retrieval.scores import DEFAULT_MIN_SCORE, auroc, fit

FACTS = ["I'm allergic to peanuts", "I'm lactose intolerant, so no milk or cheese for me",
         "My sister lives in Lisbon", "I play five-a-side football on Tuesday nights"]


@pytest.fixture(scope="module")
def mem():
    with MembrainMemory(background=False, relabel=False) as memory:
        for text in FACTS:
            memory.add(text, namespace="u")
        memory.add("The user plays the cello", namespace="solo")
        yield memory


def test_unrelated_queries_return_nothing_above_the_threshold(mem):
    for query in ("what is the weather tomorrow?", "quantum chromodynamics lecture notes"):
        assert mem.search(query, namespace="u", min_score=DEFAULT_MIN_SCORE) == []
        assert all(h.score < DEFAULT_MIN_SCORE for h in mem.search(query, namespace="u"))


def test_a_related_query_keeps_its_answer(mem):
    hits = mem.search("Do I have any food allergies?", namespace="u", min_score=DEFAULT_MIN_SCORE)
    assert hits and hits[0].text == "I'm allergic to peanuts"


def test_a_one_fact_namespace_scores_an_unrelated_query_low(mem):
    [hit] = mem.search("what is the capital of Mongolia?", namespace="solo")
    assert hit.score < 0.2
    [hit] = mem.search("What instrument do I play?", namespace="solo")
    assert hit.score > DEFAULT_MIN_SCORE


def test_min_score_drops_hits_below_it(mem):
    hits = mem.search("food", namespace="u", limit=4)
    cut = sorted(h.score for h in hits)[1]
    assert [h.key for h in mem.search("food", namespace="u", limit=4, min_score=cut)] == \
        [h.key for h in hits if h.score >= cut]


@pytest.mark.parametrize("bad", ["0.5", 1.5, -0.1, True])
def test_min_score_outside_a_probability_is_refused(mem, bad):
    with pytest.raises(InvalidOperationError, match="min_score"):
        mem.search("food", namespace="u", min_score=bad)


def test_the_store_keeps_langgraphs_conventions(mem):
    """No threshold in the store's search (LangGraph's stores have none): every hit comes."""
    store = MembrainStore(mem)
    assert len(store.search(("u",), query="quantum chromodynamics lecture notes", limit=10)) == len(FACTS)


def test_search_memory_answers_nothing_relevant(mem):
    search = memory_tools(MembrainStore(mem), namespace="u")[3]
    assert json.loads(search.invoke({"query": "quantum chromodynamics lecture notes"})) == []
    found = json.loads(search.invoke({"query": "Where does my sister live?"}))
    assert [h["content"] for h in found][:1] == ["My sister lives in Lisbon"]


def test_fit_and_auroc():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 2))
    y = (x[:, 0] + 0.3 * rng.normal(size=400) > 0).astype(int)
    w, b = fit(x, y)
    assert w[0] > 3 * abs(w[1])
    assert auroc(x[:, 0], y) > 0.9 and auroc([0.1, 0.9], [1, 0]) == 0.0 and auroc([1, 1], [1, 0]) == 0.5
