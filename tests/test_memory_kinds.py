"""Memory kinds and formation (formation.py): what an input becomes, where each kind lives,
and how search returns them.

The forming teacher here is a real teacher (the offline heuristic) that also answers the
formation question from a script, as an LLM would."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from helpers import WordEmbeddings

from langchain_membrain.errors import InvalidOperationError
from langchain_membrain.insert.formation import (
    MAX_CANDIDATES,
    MAX_WORKING_CHARS,
    FormationWarning,
    extractive_summary,
)
from langchain_membrain.memory import MembrainMemory
from langchain_membrain.teachers.heuristic import HeuristicTeacher


class ScriptedFormer(HeuristicTeacher):
    """The heuristic teacher, answering the formation question from ``script`` (input text
    -> answer); an input not in the script states nothing."""

    forms = True

    def __init__(self, script: dict[str, Any]):
        super().__init__()
        self.script = script
        self.asked: list[str] = []

    def form(self, item):
        self.asked.append(item.text)
        answer = self.script.get(item.text, {"facts": []})
        if isinstance(answer, Exception):
            raise answer
        return answer


def memory(teacher=None, storage=None) -> MembrainMemory:
    return MembrainMemory(storage, embeddings=WordEmbeddings(), teacher=teacher, background=False)


CELLO = "Oh nice! I play the cello, since 2019. What about you?"


def test_a_forming_teacher_keeps_the_input_raw_and_stores_its_facts_with_their_source():
    teacher = ScriptedFormer({CELLO: {"facts": ["Ana asked about hobbies",
                                                {"text": "Maya started the cello in 2019", "valid_from": 1546300800.0}],
                                      "experiences": ["tune the cello before every practice"],
                                      "working": "Maya and Ana talk about music"}})
    with memory(teacher) as m:
        key = m.add(CELLO, namespace="u", session="s1")
        raw = m.get(key, namespace="u")
        assert raw is not None and raw.kind == "raw" and raw.text == CELLO and raw.path == []
        facts = m.search(None, namespace="u", kinds=["fact", "experience"], limit=10)
        assert sorted((h.kind, h.text) for h in facts) == [
            ("experience", "tune the cello before every practice"),
            ("fact", "Ana asked about hobbies"), ("fact", "Maya started the cello in 2019")]
        assert all(h.sources == [key] for h in facts)
        dated = next(h for h in facts if "2019" in h.text)
        assert dated.valid_from == 1546300800.0 and dated.valid_to is None
        tree = m.tree("u")
        assert key not in tree and tree.fact_count(tree.root_id) == 3  # the raw item is never placed
        assert m.working("u", "s1").text == "Maya and Ana talk about music"
        assert m.stats()["questions"]["formation"] == 1


def test_a_fact_and_the_raw_item_it_came_from_take_one_slot():
    teacher = ScriptedFormer({CELLO: {"facts": ["Maya plays the cello", "Maya plays the cello in an orchestra"]}})
    with memory(teacher) as m:
        key = m.add(CELLO, namespace="u")
        m.add("The weather in Lisbon is sunny", namespace="u", kind="fact")
        hits = m.search("cello", namespace="u", limit=5)
        origins = [h.sources[0] if h.sources else h.key for h in hits]
        assert key in origins and len(origins) == len(set(origins))
        assert len(m.search("cello", namespace="u", kinds="raw", limit=5)) == 1


def test_the_default_search_shows_the_formed_fact_and_kinds_return_what_they_name():
    """One input formed into a fact and an experience: the default search's one slot shows
    the formed memory (its source names the input), not the raw turn; a search of the
    formed kinds returns both, each its own hit."""
    text = "Oh nice! I play the cello, since 2019. Always tune it before practice, learned that the hard way."
    teacher = ScriptedFormer({text: {"facts": ["Maya started playing the cello in 2019"],
                                     "experiences": ["tune the cello before every practice"]}})
    with memory(teacher) as m:
        key = m.add(text, namespace="u", session="s")
        m.add("The weather in Lisbon is sunny", namespace="u", kind="fact")
        first = m.search("cello", namespace="u", limit=5)[0]
        assert first.kind in ("fact", "experience") and first.sources == [key]
        both = m.search("cello", namespace="u", kinds=["fact", "experience"], limit=5)
        assert {h.kind for h in both if h.sources == [key]} == {"fact", "experience"}
        assert [h.kind for h in m.search("cello", namespace="u", kinds="raw", limit=5)] == ["raw"]


def test_kinds_are_searched_apart_and_an_unknown_kind_is_refused():
    with memory() as m:
        m.add("always book the window seat", namespace="u", kind="experience")
        m.add("the window of the kitchen is broken", namespace="u", kind="fact")
        m.add("user: the window is broken again!", namespace="u", kind="raw")
        assert [h.kind for h in m.search("window", namespace="u", kinds="experience")] == ["experience"]
        assert [h.kind for h in m.search("window", namespace="u", kinds=["raw"])] == ["raw"]
        assert sorted(h.kind for h in m.search("window", namespace="u")) == ["experience", "fact", "raw"]
        with pytest.raises(InvalidOperationError, match="unknown memory kind 'facts'"):
            m.search("window", namespace="u", kinds=["facts"])
        with pytest.raises(InvalidOperationError, match="unknown memory kind"):
            m.add("x", namespace="u", kind="note")


def test_the_offline_teacher_stores_the_input_as_its_own_fact_and_summarises_the_session():
    with memory() as m:
        key = m.add("I adopted a dog called Rex", namespace="u", metadata={"session": 1})
        m.add("Wow!", namespace="u", metadata={"session": 1})
        m.add("Rex loves the beach at Cascais", namespace="u", metadata={"session": 1})
        hit = m.get(key, namespace="u")
        assert hit.kind == "fact" and hit.sources == [] and not m.tree("u").archived("raw")
        summary = m.working("u", "1")
        assert summary.kind == "working" and "Rex" in summary.text and "Wow" not in summary.text
        assert m.working("u", "2") is None
        assert m.stats()["questions"]["formation"] == 0


@pytest.mark.parametrize("answer, kept, warned", [
    ("not a mapping", 1, "formation failed"),
    (ValueError("the model said no"), 1, "formation failed"),
    ({"facts": [f"fact number {i}" for i in range(100)]}, MAX_CANDIDATES, "candidates over"),
    ({"facts": [None, "", 7, "a real fact"]}, 1, "without text"),
    ({"facts": ["Gina visited Rome"], "working": "w" * 100_000}, 1, "working summary clipped"),
    ({"facts": [{"text": "Gina visited Rome", "valid_from": "June"}]}, 1, "not a time"),
])
def test_a_bad_formation_answer_is_clipped_or_refused_with_one_warning_and_loses_nothing(answer, kept, warned):
    text = "Gina said she visited Rome in June"
    with memory(ScriptedFormer({text: answer})) as m:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            m.add(text, namespace="u", session="s")
        said = [w for w in caught if issubclass(w.category, FormationWarning)]
        assert len(said) == 1 and warned in str(said[0].message)
        assert m.tree("u").fact_count(m.tree("u").root_id) == kept
        everything = m.search(None, namespace="u", limit=1000)
        assert any(h.text == text for h in everything)  # the input itself is kept (raw, or as said)
        current = m.working("u", "s")
        assert current is None or len(current.text) <= MAX_WORKING_CHARS


def test_an_answer_with_no_facts_keeps_only_the_raw_item():
    with memory(ScriptedFormer({})) as m:
        key = m.add("haha, same here", namespace="u")
        assert m.get(key, namespace="u").kind == "raw"
        assert m.tree("u").fact_count(m.tree("u").root_id) == 0
        assert [h.key for h in m.search("same", namespace="u")] == [key]


def test_kinds_sources_and_working_memories_survive_a_reopen(tmp_path):
    path = tmp_path / "kinds.db"
    teacher = ScriptedFormer({CELLO: {"facts": ["Maya plays the cello"], "working": "music talk"},
                              "We went to Porto": {"facts": ["Maya went to Porto"], "working": "music and travel"}})
    with memory(teacher, path) as m:
        key = m.add(CELLO, namespace="u", session="s1")
        m.add("We went to Porto", namespace="u", session="s1")
        m.add("carry a spare string", namespace="u", kind="experience")
    with memory(teacher, path) as m:
        assert m.get(key, namespace="u").kind == "raw"
        fact = next(h for h in m.search("cello", namespace="u", kinds="fact"))
        assert fact.sources == [key]
        assert [h.kind for h in m.search("spare string", namespace="u", limit=1)] == ["experience"]
        assert [h.key for h in m.search("cello", namespace="u", kinds="raw", limit=1)] == [key]
        assert m.working("u", "s1").text == "music and travel"
        assert [w.text for w in m.working_history("u", "s1")] == ["music talk", "music and travel"]


def test_purge_history_leaves_raw_items_and_working_memories():
    with memory(ScriptedFormer({CELLO: {"facts": ["Maya plays the cello"], "working": "music"}})) as m:
        key = m.add(CELLO, namespace="u", session="s1")
        m.purge_history("u")
        assert m.get(key, namespace="u").kind == "raw" and m.working("u", "s1").text == "music"


def test_the_extractive_summary_keeps_the_sentences_that_say_most():
    said = ["Hi!", "I moved to Porto last month. It rains a lot.", "Cool!", "My sister Ines lives in Manchester."]
    summary = extractive_summary(said, max_chars=80)
    assert "Porto" in summary and "Ines" in summary and "Hi" not in summary and len(summary) <= 80


def test_a_store_user_chooses_the_kind_through_the_value_or_the_index_configuration():
    from langchain_membrain.integrations.store import MembrainStore

    with MembrainStore(memory(), index={"kind": "experience"}) as store:
        store.put(("u",), "k1", {"content": "always check both calendars first"})
        store.put(("u",), "k2", {"content": "Maya lives in Lisbon", "kind": "fact"})
        kinds = {h.key: h.kind for h in store.memory.search("calendars Lisbon", namespace="u", limit=5)}
        assert kinds == {"k1": "experience", "k2": "fact"}
    with MembrainStore(memory()) as store:
        store.put(("u",), "k3", {"content": "pack the charger", "kind": "experience"})
        assert [h.kind for h in store.memory.search("charger", namespace="u", kinds="experience")] == ["experience"]
        assert [i.key for i in store.search(("u",), query="charger", filter={"kind": "experience"})] == ["k3"]
    with pytest.raises(ValueError, match="index\\['kind'\\]"):
        MembrainStore(memory(), index={"kind": "raw"})


def test_the_html_view_shows_kinds_sources_raw_items_and_summaries():
    from langchain_membrain.tree.export import tree_to_html

    since = 1683417600.0  # 2023-05-07, UTC: the formed fact's valid_from
    teacher = ScriptedFormer({CELLO: {"facts": [{"text": "Maya plays the cello", "valid_from": since}],
                                      "experiences": ["rosin the bow first"], "working": "music talk"}})
    with memory(teacher) as m:
        m.add(CELLO, namespace="u", session="s1")
        page = tree_to_html(m.tree("u"))
    assert "Maya plays the cello" in page and '<span class="kind">experience</span>' in page
    assert '<span class="when">valid from 2023-05-07</span>' in page  # its valid time, not created_at
    assert '<span class="when">stored ' in page  # the experience has none: when it was stored
    assert page.count("from: “Oh nice! I play the cello") == 2  # under each formed leaf
    assert "said (raw items)" in page and "session summaries (working memory)" in page and "music talk" in page


class SmallTalkFormer(HeuristicTeacher):
    """Forms a fact from every statement and nothing from small talk."""

    forms = True

    def __init__(self):
        super().__init__()
        self.asked = 0

    def form(self, item):
        self.asked += 1
        return {"facts": [] if item.text.startswith("wow") else [f"Maya said: {item.text}"]}


def test_the_formation_student_learns_what_states_nothing_and_stops_asking_about_it():
    teacher = SmallTalkFormer()
    goods = ["apples", "a bike", "shoes", "bread", "a lamp", "paint", "a kite", "tea", "a drum", "socks"]
    inputs = []
    for i in range(400):
        inputs.append(f"wow haha so nice lol {i % 7}" if i % 2 else f"I bought {goods[i % 10]} at the market {i}")
    with memory(teacher) as m:
        keys = m.add_many(inputs, namespace="u")
        st = m.stats()["formation"]
        assert st["decisions"] == len(inputs) and st["student_decided"] > 50
        assert teacher.asked == len(inputs) - st["student_decided"]
        assert st["agreement"] >= 0.95 and st["compared"] >= 50
        # nothing is lost: each small-talk input is a raw item, each statement formed its fact
        kinds = [m.get(k, namespace="u").kind for k in keys]
        assert kinds == ["raw"] * len(inputs)
        assert m.tree("u").fact_count(m.tree("u").root_id) == len(inputs) // 2


def test_a_raw_item_is_found_by_its_facts_words():
    teacher = ScriptedFormer({"Oh nice! I play it since 2019": {"facts": ["Maya plays the cello"]}})
    with memory(teacher) as m:
        key = m.add("Oh nice! I play it since 2019", namespace="u")
        m.add("We went hiking in the Alps", namespace="u", kind="raw")
        assert m.search("cello", namespace="u", kinds="raw", limit=1)[0].key == key


def test_the_second_step_searches_again_with_the_best_facts():
    from langchain_membrain.index.config import RetrievalConfig

    said = {"Gina: my trip is booked!": {"facts": ["Gina booked a trip to Rome"]},
            "Rome was so hot in June": {"facts": []}}
    fillers = [f"the {w} needs fixing" for w in ("sink", "roof", "bike", "door", "lamp", "fence")]

    def score_of_rome(second_step: int) -> float:
        """Rome's raw item shares no word with the query, only with the fact found first
        (its ranking score, reads.rank's: the hit's score is a calibrated probability)."""
        from langchain_membrain.retrieval import reads

        with MembrainMemory(embeddings=WordEmbeddings(), teacher=ScriptedFormer(said), background=False,
                            retrieval=RetrievalConfig(second_step=second_step, second_step_weight=1.0)) as m:
            for text in ["Gina: my trip is booked!", "Rome was so hot in June", *fillers]:
                m.add(text, namespace="u")
            hits = m.search("where does Gina's trip go?", namespace="u", limit=8)
            ns = ("u",)
            rome = next(h.key for h in hits if h.text == "Rome was so hot in June")
            ranked = reads.rank(m._forest, ns, m.tree(ns), "where does Gina's trip go?", None, 8, {},
                                embed=m._embed, mode=m.search_mode)
            return dict(ranked)[rome]

    assert score_of_rome(5) > score_of_rome(0)


class BatchFormer(HeuristicTeacher):
    """Answers batches: a fact for every input that names a city, and an entry for an input
    that was never shown."""

    forms = True

    def __init__(self):
        super().__init__()
        self.batches: list[int] = []

    def form(self, item):
        return {"facts": [f"Maya mentioned {item.text}"] if "city" in item.text else []}

    def form_batch(self, items):
        self.batches.append(len(items))
        entries = [{"number": n, "facts": [f"Maya mentioned {i.text}"]} for n, i in enumerate(items, 1)
                   if "city" in i.text]
        return {"inputs": entries + [{"number": 42, "facts": ["an invented fact"]}], "working": "cities"}


def test_inputs_of_one_session_are_formed_in_batches_and_unknown_inputs_are_refused():
    teacher = BatchFormer()
    said = [f"the city number {i}" if i % 2 else f"ok {i}" for i in range(10)]
    with memory(teacher) as m:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            keys = m.add_many(said, namespace="u", session="s")
        assert teacher.batches == [8, 2]
        assert m.stats()["questions"]["formation"] == 2
        assert sum(issubclass(w.category, FormationWarning) and "was not shown" in str(w.message)
                   for w in caught) == 2  # one per answer
        facts = m.search(None, namespace="u", kinds="fact", limit=100)
        assert sorted(h.text for h in facts) == sorted(f"Maya mentioned {t}" for t in said if "city" in t)
        by_text = {m.get(k, namespace="u").text: k for k in keys}
        assert all(h.sources == [by_text[h.text.removeprefix("Maya mentioned ")]] for h in facts)
        assert all(m.get(k, namespace="u").kind == "raw" for k in keys)
        assert m.working("u", "s").text == "cities"


def test_a_batch_never_mixes_sessions():
    teacher = BatchFormer()
    with memory(teacher) as m, pytest.warns(FormationWarning, match="was not shown"):
        m.add_many([f"city {i}" for i in range(6)], namespace="u", metadatas=[{"session": i // 3} for i in range(6)])
    assert teacher.batches == [3, 3]


def test_a_reopened_formed_memory_searches_as_the_live_one(tmp_path):
    from langchain_membrain.index.config import RetrievalConfig

    topics = ["cellos and music", "a trip to Rome", "baking bread", "moving to Porto", "green tea", "the dog Rex",
              "a new bike", "the garden", "jazz records", "a broken phone"]
    said = [f"Maya: we talked about {t}" for t in topics]
    script = {t: {"facts": [f"Maya cares about {t.rsplit(' ', 1)[-1]}"]} for t in said[::2]}
    queries = ["what does Maya care about?", "Rome", "bread and tea", "the dog"]
    config = RetrievalConfig.for_chat()

    def results(m: MembrainMemory) -> list:
        return [[(h.key, round(h.score, 6)) for h in m.search(q, namespace="u", limit=4)] for q in queries]

    with MembrainMemory(tmp_path / "f.db", embeddings=WordEmbeddings(), teacher=ScriptedFormer(script),
                        background=False, retrieval=config) as m:
        m.add_many(said, namespace="u", metadatas=[{"session": i // 4, "speaker": "Maya"} for i in range(len(said))])
        live = results(m)
    with MembrainMemory(tmp_path / "f.db", embeddings=WordEmbeddings(), teacher=ScriptedFormer(script),
                        background=False, retrieval=config) as m:
        assert results(m) == live
