"""bench labels: aspect labels scored against the name a person gave each topic."""

from __future__ import annotations

import pytest
from helpers import WordEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.bench.labels import phrase_labeller, score_label, summarize, topic_labels, tree_labels

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def embed(texts: list[str]) -> list[list[float]]:
    return WordEmbeddings().embed_documents(texts)


GARDEN = ["garden roses bloom early", "garden tomatoes need water", "garden soil is clay", "garden shed roof leaks",
          "garden roses need pruning", "garden beds are weeded"]
CYCLING = ["cycling to work on the bike", "cycling club ride on sunday", "bike tyre puncture while cycling",
           "new bike helmet for cycling", "cycling holiday by bike", "bike chain oiled after cycling"]
PERSONAS = {"ana": [{"persona": "ana", "topic": "garden", "text": t} for t in GARDEN]
            + [{"persona": "ana", "topic": "cycling", "text": t} for t in CYCLING]}


def test_a_label_equal_to_its_topic_scores_one_and_names_it():
    assert score_label("garden", "garden", ["cycling", "garden"], embed) == pytest.approx((1.0, True))
    score, names = score_label("cycling", "garden", ["cycling", "garden"], embed)
    assert score < 0.5 and not names


def test_each_topic_is_labelled_from_its_own_facts():
    scores = topic_labels(PERSONAS, phrase_labeller(embed), embed)
    assert {(s.topic, s.label.casefold()) for s in scores} == {("garden", "garden"), ("cycling", "cycling")}
    assert summarize(scores) == {"labels": 2, "score": 1.0, "names_topic": 1.0, "majority_share": 1.0}
    assert summarize([]) == {"labels": 0}


def test_the_product_trees_aspects_are_scored_against_their_majority_topic():
    from langchain_membrain.bench.persona_sets import load_personas
    from langchain_membrain.index.embeddings import MiniLMEmbeddings

    minilm = MiniLMEmbeddings()
    persona = {"hannah_goldberg": load_personas("heldout")["hannah_goldberg"]}
    topics = {r["topic"] for r in persona["hannah_goldberg"]}
    out = tree_labels(persona, minilm.embed_documents, lambda: MembrainMemory(embeddings=minilm, background=False),
                      phrase_labeller(minilm.embed_documents))
    assert len(out["current"]) >= 2, "the persona's tree has aspects"
    assert [s.majority_share for s in out["relabelled"]] == [s.majority_share for s in out["current"]]
    for cur in out["current"]:
        assert cur.topic in topics and 1 / len(topics) <= cur.majority_share <= 1.0 and cur.facts >= 2
        assert -1.0 <= cur.score <= 1.0 and cur.label.strip()


def test_the_vocabulary_labeller_names_a_group_by_the_topic_it_fits_best():
    from langchain_membrain.bench.labels import load_vocabulary, vocabulary_labeller

    vocabulary = load_vocabulary()
    assert len(vocabulary) >= 200 and "garden" in vocabulary and not any(t.startswith("#") for t in vocabulary)
    assert "garden" not in load_vocabulary(exclude=["Garden"])
    scores = topic_labels(PERSONAS, vocabulary_labeller(embed, ["music", "cycling", "travel", "garden"]), embed)
    assert {(s.topic, s.label) for s in scores} == {("garden", "garden"), ("cycling", "cycling")}
    label = vocabulary_labeller(embed, ["garden", "cycling"])
    assert label(GARDEN, embed(GARDEN)[0], ["garden"], embed(CYCLING)[0]) == "cycling"  # what it avoids is skipped
