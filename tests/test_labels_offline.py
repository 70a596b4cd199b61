"""Offline aspect labels: phrases of the facts' own words, chosen by embedding, no LLM."""

from __future__ import annotations

import re
import unicodedata

import numpy as np
import pytest
from helpers import WordEmbeddings

from langchain_membrain.tree.labels import label_candidates, offline_label, typical_facts
from langchain_membrain.tree.tree import MembrainTree

RUNNING = [
    "I ran 12 km along the river this morning.",
    "My knee started hurting after the long run on Sunday.",
    "The physio said my knee pain comes from running too much downhill.",
    "Training for the Lisbon half marathon in October.",
    "I do interval training on Tuesdays with the running club.",
    "Bought new running shoes with more cushioning for my knee.",
]
CAFE = [
    "Maya: The café in Lisbon near our flat makes the best pastéis de nata.",
    "Maya: We go to the café every morning before work.",
    "Maya: The café owner, João, speaks a little English.",
    "Maya: The café closes early on Sundays.",
    "Maya: Coffee at the café costs less than a euro.",
]
POTTERY_CHAT = [
    "Melanie: I started a pottery class last month.",
    "Melanie: The pottery teacher showed us how to center clay on the wheel.",
    "Melanie: My first bowl came out lopsided, lol.",
    "Melanie: I glazed two mugs in blue at the pottery studio.",
    "Melanie: yeah I really love the kiln day",
    "Caroline: that's so cool, pottery sounds relaxing!",
]
ABOUT_MELANIE = [
    "Melanie's birthday is on 3 May.",
    "Melanie lives in Bristol with her two kids.",
    "Melanie works as a nurse.",
    "Melanie likes camping with her family.",
]
FOOTBALL = [
    "Tom's school wants him to join the football team.",
    "Tom has football practice on Wednesdays after school.",
    "The coach says Tom is a good goalkeeper.",
    "Tom scored in the school football match against St Mary's.",
    "Tom needs new football boots, size 4.",
]
JAPAN = [
    "Planning a trip to Japan in April for the cherry blossoms.",
    "We booked a ryokan in Kyoto for three nights.",
    "The flight to Tokyo leaves from Heathrow at 9am.",
    "I want to visit the Fushimi Inari shrine.",
    "Need to get a JR rail pass before the trip.",
    "Budget for Japan is about £3000.",
]
DIET = [
    "I'm vegetarian since 2019.",
    "I'm allergic to peanuts.",
    "I avoid dairy because I'm lactose intolerant.",
    "My favourite dish is mushroom risotto.",
    "I cook lentil curry most Mondays.",
]
GROUPS = [RUNNING, CAFE, POTTERY_CHAT, ABOUT_MELANIE, FOOTBALL, JAPAN, DIET]


@pytest.fixture(scope="module")
def embed(one_torch_thread):
    from langchain_membrain.index.embeddings import MiniLMEmbeddings

    return MiniLMEmbeddings().embed_documents


def fake_embed(texts: list[str]) -> list[list[float]]:
    """Deterministic and instant: texts sharing words are similar."""
    return WordEmbeddings().embed_documents(texts)


def words_of(texts: list[str]) -> set[str]:
    return {w.casefold() for t in texts for w in re.findall(r"\w+", unicodedata.normalize("NFC", t))}


def n_words(label: str) -> int:
    return len(label.split())


# ------------------------------------------------------------------ with the real embedder

def test_facts_about_running_and_a_knee_are_labelled_by_running_or_knee(embed):
    label = offline_label(RUNNING, embed).casefold()
    assert "running" in label or "knee" in label


def test_a_cafe_keeps_its_accent(embed):
    assert "café" in offline_label(CAFE, embed)
    assert "caf" not in {c.casefold() for c in label_candidates(CAFE)}


def test_a_speaker_prefix_never_becomes_the_label(embed):
    for e in (embed, None):
        label = offline_label(POTTERY_CHAT, e)
        assert "melanie" not in label.casefold() and "caroline" not in label.casefold()
        assert "pottery" in label.casefold()


def test_a_speaker_named_once_in_the_chat_is_not_the_label(embed):
    chat = ["Caroline: I went to an LGBTQ support group yesterday.",
            "Caroline: The support group helped me feel accepted.",
            "Caroline: I'm thinking about a career in counseling for transgender people.",
            "Melanie: that's awesome Caroline!",
            "Caroline: the transgender stories at the support group were so powerful."]
    label = offline_label(chat, embed).casefold()
    assert "caroline" not in label and "melanie" not in label
    assert "support group" in label or "transgender" in label or "lgbtq" in label


def test_a_name_every_fact_is_about_may_be_the_label(embed):
    assert offline_label(ABOUT_MELANIE, embed) == "Melanie"


def test_labels_are_one_to_four_words_of_the_facts(embed):
    for texts in GROUPS:
        label = offline_label(texts, embed)
        assert 1 <= n_words(label) <= 4
        assert {w.casefold() for w in re.findall(r"\w+", label)} <= words_of(texts), label


def test_a_label_is_not_a_clause(embed):
    label = offline_label(FOOTBALL, embed)
    assert label.casefold() not in {"tom has football practice", "tom needs new football"}
    assert "has" not in label.split() and "needs" not in label.split()


def test_labels_differ_from_the_parent_and_the_siblings(embed):
    first = offline_label(RUNNING, embed)
    second = offline_label(RUNNING, embed, avoid=[first.upper()])
    assert second.casefold() != first.casefold()
    third = offline_label(RUNNING, embed, avoid=[first, second])
    assert third.casefold() not in {first.casefold(), second.casefold()}
    for texts in GROUPS:
        label = offline_label(texts, embed)
        assert offline_label(texts, embed, avoid=["Topic", label]).casefold() != label.casefold()


def test_a_child_does_not_repeat_its_parents_label(embed):
    knee = ["My knee hurts after runs.", "Knee pain when I climb stairs.", "The knee is swollen.",
            "Physio for the knee on Fridays."]
    assert offline_label(knee, embed).casefold() == "knee"
    for parent in ("knee", "Knee", "knee injury", "my knee"):
        label = offline_label(knee, embed, avoid=[parent])
        assert label.casefold() != "knee"
        assert label.strip()


def test_the_given_mean_embedding_is_used(embed):
    # The aspect's mean embedding as the tree keeps it: of the raw facts.
    mean = np.mean(np.asarray(embed(JAPAN)), axis=0)
    label = offline_label(JAPAN, embed, mean=mean)
    assert any(w in label.casefold() for w in ("japan", "trip", "kyoto", "tokyo"))


def test_one_embed_call_per_label_on_a_bounded_number_of_phrases(embed):
    calls: list[int] = []

    def counting(texts):
        calls.append(len(texts))
        return embed(texts)

    texts = RUNNING + JAPAN  # 12 facts, hundreds of candidate phrases
    assert len(label_candidates(texts)) > 64
    offline_label(texts, counting, max_candidates=16)
    assert calls == [16 + len(texts)]  # the phrases and the facts, at once
    calls.clear()
    offline_label(texts, counting, mean=np.ones(384), max_candidates=16)
    assert calls == [16]


def test_labels_are_deterministic(embed):
    for texts in GROUPS:
        assert offline_label(texts, embed) == offline_label(list(texts), embed)


# ------------------------------------------------------------------ candidates and edge cases

def test_candidates_neither_start_nor_end_with_a_stopword():
    cands = label_candidates(["Caroline: I went to the café near Lisbon's old town yesterday!",
                              "Yeah the café in Lisbon was really lovely, lol."])
    folded = [c.casefold() for c in cands]
    assert "café" in cands and "Lisbon" in cands and "café near lisbon" in folded
    assert "old town" in folded and "café in lisbon" in folded
    for c in folded:
        first, *_, last = c.split() if n_words(c) > 1 else (c, c)
        assert first not in {"the", "i", "went", "yeah", "lol", "in"}
        assert last not in {"the", "yesterday", "lol", "in", "lisbon's"}
    assert "caroline" not in folded  # the speaker prefix is dropped
    assert len(folded) == len(set(folded))


def test_candidates_keep_the_most_frequent_surface_form():
    cands = label_candidates(["Pottery class on Monday.", "the pottery class was fun", "pottery class again"])
    assert "pottery class" in cands and "Pottery class" not in cands
    assert cands[0] == "pottery class"  # in every fact, and longer than its words


def test_candidates_exclude_numbers_only_and_respect_max_words():
    cands = label_candidates(["I ran 12 km in 2024, 5 times 10 km", "12 34 56"], max_words=2)
    assert "12" not in cands and "2024" not in cands and "12 34" not in cands
    assert "km" in cands
    assert all(1 <= n_words(c) <= 2 for c in cands)
    dated = label_candidates(["Memory clinic appointment on 2024-09-02.", "Checkup on 2024-09-02 at 9:30."])
    assert "2024-09-02" not in dated and not any(c.endswith("2024-09-02") for c in dated)  # a date is a number
    assert "Memory clinic" in dated
    assert all(n_words(c) == 1 for c in label_candidates(RUNNING, max_words=1))
    with pytest.raises(ValueError):
        label_candidates(RUNNING, max_words=0)


def test_decomposed_accents_are_kept():
    nfd = unicodedata.normalize("NFD", "Our café in Zürich, the café near the station.")
    assert offline_label([nfd], None) == "café"
    assert "Zürich" in label_candidates([nfd])


@pytest.mark.parametrize("texts", [[], [""], ["   "], ["!!! ... ???"], ["🙂🎉👍"], ["yeah lol ok", "haha"],
                                   ["12", "3.5"]])
def test_a_label_is_never_empty(texts):
    for e in (None, fake_embed):
        assert offline_label(texts, e) == "topic"
        assert offline_label(texts, e, avoid=["topic"]) == "topic 2"
        assert offline_label(texts, e, avoid=["topic", "Topic 2"]) == "topic 3"


def test_a_weak_word_is_a_last_resort_label():
    assert offline_label(["Today!", "today, today"], None) == "today"
    assert offline_label(["Yesterday I met Priya.", "Priya yesterday"], None) == "Priya"


def test_everything_avoided_falls_back_without_repeating():
    texts = ["knee", "Knee!", "knee knee"]
    for e in (None, fake_embed):
        label = offline_label(texts, e, avoid=["KNEE"])
        assert label.casefold() != "knee" and label.strip()


def test_the_fake_embedder_gives_valid_labels():
    for texts in GROUPS:
        label = offline_label(texts, fake_embed, avoid=["running"])
        assert 1 <= n_words(label) <= 4 and label.casefold() != "running"
        assert offline_label(texts, fake_embed, max_words=2) == offline_label(texts, fake_embed, max_words=2)
        assert n_words(offline_label(texts, fake_embed, max_words=2)) <= 2


def test_a_label_for_an_aspect_of_a_tree():
    emb = WordEmbeddings()
    tree = MembrainTree("me", dim=emb.dimensions)
    facts = [tree.add_fact(tree.root_id, t, embedding=np.asarray(emb.embed_query(t), dtype=np.float32))
             for t in RUNNING]
    sport = tree.group(facts, "sport")
    label = offline_label(typical_facts(tree, sport), emb.embed_documents,
                          mean=tree.mean_embedding(sport), avoid=[tree.node(sport).text])
    assert label.casefold() != "sport" and 1 <= n_words(label) <= 4
    assert {w.casefold() for w in re.findall(r"\w+", label)} <= words_of(RUNNING)


def test_the_label_cache_embeds_each_phrase_once_and_keeps_order(embed):
    from langchain_membrain.index.embeddings import EmbeddingCache

    seen: list[str] = []

    def counting(texts):
        seen.extend(texts)
        return embed(texts)

    cache = EmbeddingCache(counting, maxsize=3)
    got = cache(["knee", "run", "knee"])
    np.testing.assert_allclose(got, embed(["knee", "run", "knee"]), atol=1e-6)
    assert seen == ["knee", "run"]  # a repeat within one call is embedded once
    cache(["run", "knee", "café"])
    assert seen == ["knee", "run", "café"]
    cache(["pastel"])  # a fourth phrase: the least recently used ("run") goes
    cache(["run"])
    assert seen == ["knee", "run", "café", "pastel", "run"]
    assert cache([]).shape[0] == 0
    assert (cache.hits, cache.misses) == (3, 5)


def test_a_memory_embeds_each_label_phrase_once(one_torch_thread):
    """Naming and renaming embed the same n-gram candidates again and again (most of a
    long chat's CPU time went there): through the memory, each phrase is embedded once."""
    from collections import Counter

    from langchain_membrain.bench.persona_sets import load_personas
    from langchain_membrain.index.embeddings import MiniLMEmbeddings
    from langchain_membrain.memory import MembrainMemory

    class Counting(MiniLMEmbeddings):
        texts: Counter[str] = Counter()

        def embed_array(self, texts):
            self.texts.update(texts)
            return super().embed_array(texts)

    persona, rows = sorted(load_personas("heldout").items())[0]
    emb = Counting()
    with MembrainMemory(embeddings=emb, background=False) as mem:
        for r in rows:
            mem.add(r["text"], namespace=persona)
        named = [mem.tree(persona).node(a).text for a in mem.tree(persona).aspects()]
    assert named, "the memory named no aspect: the test checks nothing"
    facts = {r["text"] for r in rows}
    assert max(n for t, n in emb.texts.items() if t not in facts) == 1
