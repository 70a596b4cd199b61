"""Aspects named by the topic their facts share (tree/vocabulary.py, labels.aspect_label)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from langchain_membrain.tree.labels import aspect_label
from langchain_membrain.tree.vocabulary import TOPIC_BAR, TopicVocabulary, shipped_topics

WORDS = "garden roses soil cycling music ryokan near gion the had a cedar bath".split()


def embed(texts: list[str]) -> np.ndarray:
    """One axis per word of WORDS: texts sharing words are similar, and nothing else is."""
    out = np.zeros((len(texts), len(WORDS)))
    for i, text in enumerate(texts):
        for word in text.lower().split():
            out[i, WORDS.index(word)] += 1.0
    return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


def test_the_shipped_vocabulary_holds_a_few_hundred_topics_of_personal_life():
    topics = shipped_topics()
    assert len(topics) >= 200 and len(set(topics)) == len(topics)
    assert {"food", "travel", "exercise"} <= set(topics)
    assert all(t == t.strip().lower() and t and not t.startswith("#") for t in topics)


def test_the_topic_of_best_fit_names_the_group_and_what_it_avoids_is_skipped():
    vocabulary = TopicVocabulary(embed, ["garden", "cycling", "music"])
    garden = embed(["garden roses", "garden soil"]).mean(axis=0)
    assert vocabulary.topic(garden) == "garden"
    assert vocabulary.topic(garden, avoid=["Garden"]) is None  # the others are under the bar
    # A topic that fits the surroundings as well as the group names nothing in particular.
    vocabulary = TopicVocabulary(embed, ["garden", "cycling", "music"], bar=0.3)
    group = embed(["music garden", "music garden", "music cycling"]).mean(axis=0)
    assert vocabulary.topic(group) == "music"
    assert vocabulary.topic(group, context=embed(["music"])[0]) == "garden"


def test_a_group_that_shares_no_topic_keeps_a_name_made_of_its_own_words():
    vocabulary = TopicVocabulary(embed, ["garden", "cycling"])
    texts = ["ryokan near gion", "the ryokan had a cedar bath"]
    assert vocabulary.topic(embed(texts).mean(axis=0)) is None
    label = aspect_label(texts, embed, vocabulary=vocabulary)
    assert label and all(w in " ".join(texts).lower() for w in label.lower().split())
    assert aspect_label(["garden roses", "garden soil"], embed, vocabulary=vocabulary) == "garden"
    # Without a vocabulary the name is a phrase of the facts' own words, as before.
    assert aspect_label(["garden roses", "garden soil"], embed) in {"garden", "garden roses", "garden soil"}
    assert 0 < TOPIC_BAR < 1


def test_an_embedding_of_another_size_or_a_zero_mean_has_no_topic():
    vocabulary = TopicVocabulary(embed, ["garden"])
    assert vocabulary.topic(np.ones(3)) is None
    assert vocabulary.topic(np.zeros(len(WORDS))) is None
    assert TopicVocabulary(embed, []).topic(np.ones(len(WORDS))) is None


@pytest.mark.usefixtures("one_torch_thread")
def test_minilm_names_the_readmes_food_and_travel_facts_by_their_topic():
    from langchain_membrain.index.embeddings import MiniLMEmbeddings

    minilm = MiniLMEmbeddings()
    vocabulary = TopicVocabulary(minilm.embed_documents)
    food = ["I'm allergic to peanuts", "I've been vegetarian since 2019", "I can't stand coriander",
            "I love miso ramen"]
    trips = ["We went to Kyoto in April", "Next trip: the Azores in September", "We took the night train to Porto",
             "I want to see the fjords in Norway"]
    everything = np.asarray(minilm.embed_documents(food + trips)).mean(axis=0)
    food_label = aspect_label(food, minilm.embed_documents, vocabulary=vocabulary, context=everything)
    trips_label = aspect_label(trips, minilm.embed_documents, vocabulary=vocabulary, context=everything)
    assert food_label in shipped_topics() and trips_label in shipped_topics()
    # Each label is nearer its own topic's plain name than the other's.
    food_v, travel_v, fl, tl = (np.asarray(v) for v in minilm.embed_documents(["food", "travel", food_label, trips_label]))
    assert fl @ food_v > fl @ travel_v and tl @ travel_v > tl @ food_v


def quickstart_facts() -> list[str]:
    """The facts ``examples/quickstart.py`` (the README's quickstart) adds."""
    source = (Path(__file__).parents[1] / "examples" / "quickstart.py").read_text(encoding="utf-8")
    call = next(node for node in ast.walk(ast.parse(source))
                if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_many")
    return ast.literal_eval(call.args[0])


@pytest.mark.usefixtures("one_torch_thread")
def test_the_readmes_quickstart_tree_is_named_by_topics():
    from langchain_membrain import MembrainMemory

    facts = quickstart_facts()
    with MembrainMemory(background=False) as memory:
        memory.add_many(facts, namespace="users/maya")
        tree = memory.tree("users/maya")
        labels = [tree.node(a).text for a in tree.child_aspects(tree.root_id)]
    assert len(labels) >= 3
    topical = [label for label in labels if label in shipped_topics()]
    assert len(topical) >= len(labels) / 2, labels  # the others: a group's own words, where no topic fits
