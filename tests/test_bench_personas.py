"""bench personas: persona trees through the product beside offline clusterings."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import WordEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.bench.personas import kmeans_tree, measure, memory_builder, score_tree, summarize

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOPICS = {
    "garden": ["garden roses bloom early", "garden tomatoes need water", "garden soil is clay",
               "garden shed roof leaks", "garden roses need pruning"],
    "cycling": ["cycling to work on the bike", "cycling club ride on sunday", "bike tyre puncture while cycling",
                "new bike helmet for cycling", "bike chain oiled after cycling"],
    "piano": ["piano lessons on thursday", "piano teacher is strict", "practising piano scales daily",
              "bought a used piano", "piano recital in june"],
}
ROWS = [{"persona": "ana", "topic": t, "text": x} for t, xs in TOPICS.items() for x in xs]


def embed(texts: list[str]) -> np.ndarray:
    return np.asarray(WordEmbeddings().embed_documents(texts))


def test_kmeans_told_the_topic_count_recovers_separable_topics():
    rng = np.random.default_rng(0)
    topic_ids = [list(TOPICS).index(r["topic"]) for r in ROWS]
    vecs = np.eye(8)[topic_ids] + 0.05 * rng.normal(size=(len(ROWS), 8))
    tree, ids = kmeans_tree(vecs, 3)
    tree.check_invariants()
    row = score_tree("ana", "k-means", tree, ids, [r["topic"] for r in ROWS])
    assert row.purity == pytest.approx(1.0)
    assert (row.top_aspects, row.root_share, row.facts) == (3, 0.0, 15)


def test_every_builder_is_scored_on_every_persona_and_flat_is_the_floor():
    online = {"product": memory_builder(lambda: MembrainMemory(embeddings=WordEmbeddings(), background=False))}
    rows = measure({"ana": ROWS}, embed, online)
    by = {r.builder: r for r in rows}
    assert set(by) == {"product", "flat", "k-means, k topics", "average linkage"}
    # Flat: every pair's lowest common ancestor is the root, so purity is the topics' share.
    assert by["flat"].purity == pytest.approx(5 / 15) and by["flat"].root_share == 1.0
    assert by["product"].facts == 15 and 0.0 < by["product"].purity <= 1.0
    assert by["average linkage"].purity >= by["flat"].purity
    s = summarize([by["flat"], by["k-means, k topics"]])
    assert s["personas"] == 2 and s["purity_min"] == pytest.approx(round(5 / 15, 3))
    assert s["three_topics"] == 1


def test_an_unknown_persona_set_is_a_one_line_error():
    from langchain_membrain.bench.__main__ import main

    with pytest.raises(SystemExit, match="--set takes heldout, tune"):
        main(["personas", "--set", "tune,nobody"])
