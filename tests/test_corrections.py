"""What the user said last comes first: corrections as people write them are UPDATEs, a
statement that supersedes a returned memory is placed just before it, look-alikes change
nothing, and scores never rise down a result list."""

from __future__ import annotations

import json

import pytest

from langchain_membrain import MembrainMemory
from langchain_membrain.integrations.store import MembrainStore
from langchain_membrain.integrations.tools import memory_tools
from langchain_membrain.retrieval.scores import DEFAULT_MIN_SCORE
from langchain_membrain.retrieval.supersession import restates
from langchain_membrain.teachers.operation_rule import conservative_operation, states_something
from langchain_membrain.teachers.supersession import (
    carried_statement,
    change_cue,
    holder,
    named_old_values,
    slots,
    speakers_own,
    supersedes,
)
from langchain_membrain.tree.operation_types import Candidate, OperationQuestion


@pytest.mark.parametrize("text", [
    "I quit Google and joined Microsoft", "I moved to Porto", "I'm at Deloitte now", "switched from EE to Three",
    "Rex passed away", "got promoted to team lead", "we divorced last year", "I changed my number",
    "the dentist got pushed back to the 14th", "the trip is cancelled", "not doing the marathon after all",
    "started smoking again", "I'm no longer vegan", "I don't drink coffee anymore"])
def test_change_cues_as_people_write_them(text):
    assert change_cue(text)


@pytest.mark.parametrize("text", ["I live in Lisbon", "I visited Porto for a wedding", "I like tea"])
def test_no_change_cue(text):
    assert not change_cue(text)


def test_holder_and_named_old_values():
    assert holder("My brother just joined Microsoft") == "brother"
    assert holder("Tom the cat passed away last week") == "tom"
    assert holder("I moved from Lisbon to Porto") is None
    assert holder("Finally moved to Porto!") is None  # an opener, not a name
    assert named_old_values("I moved from Paris to Rome") == ["paris"]
    assert named_old_values("I quit Google and joined Microsoft") == ["google"]


def test_supersedes_needs_the_same_holder_and_the_old_value_stored():
    assert supersedes("I quit Google and joined Microsoft", "I work at Google", 0.53)
    assert not supersedes("My brother just joined Microsoft", "I work at Microsoft", 0.59)  # another holder
    assert supersedes("Tom the cat passed away last week", "I have a cat named Tom", 0.70)  # named in the old fact
    assert not supersedes("I moved from Paris to Rome", "I live in Lisbon", 0.6)  # Paris was never stored
    assert not supersedes("I visited Porto for a wedding", "I live in Porto", 0.65)  # no change stated
    assert not supersedes("I moved to Porto", "I play the oboe", 0.2)  # not near


@pytest.mark.parametrize("new, old, cosine", [
    ("The Iceland trip is cancelled, the airline went bust", "I'm going to Iceland for a week in October", 0.51),
    ("Someone stole my Brompton from outside the station", "I ride a blue Brompton to work", 0.53),  # a thing's name
    ("I don't vape anymore, quit completely at New Year", "I vape", 0.73),  # "completely" names no old value
    ("Traded the Focus in for a secondhand Kia Niro", "I drive a Ford Focus estate", 0.38),
])
def test_a_change_to_a_thing_the_speaker_named_supersedes_it(new, old, cosine):
    assert supersedes(new, old, cosine, runner_up=0.2)
    assert holder("The Iceland trip is off") == "iceland trip"


def test_a_change_of_a_one_valued_attribute_supersedes_its_old_value_however_far():
    """An attribute held one value at a time (home, work, partner, diet...): a change naming it
    supersedes a fact naming it though their embeddings are far apart; a fact of another
    attribute, or a change that is no change ("for now"), does not."""
    assert slots("Jordi and I rented our own place in Ruzafa") == {"home"}
    assert slots("We moved to Amsterdam in June") == {"home"}
    assert supersedes("We moved to Amsterdam in June; we rent a flat in De Pijp",
                      "Jordi and I rented our own place in Ruzafa", 0.40, runner_up=0.44)
    assert supersedes("The cardiologist has me on a low-salt diet now", "I eat meat and three veg", 0.30, runner_up=0.26)
    assert not supersedes("I moved the standup to Friday now", "I live in Leeds", 0.25)  # no attribute shared
    assert not supersedes("No pets for now, the landlord doesn't allow them", "I live in a flat in Oslo", 0.25)


def _ask(text: str, *candidates: tuple[str, str, float]) -> str:
    question = OperationQuestion(text, None, tuple(Candidate(k, t, s) for k, t, s in candidates))
    op = conservative_operation(question)
    return op.kind if op.target is None else f"{op.kind} {op.target}"


def test_the_offline_rule_updates_the_fact_a_statement_supersedes():
    lisbon, tea = ("home", "I live in Lisbon", 0.75), ("tea", "I like green tea", 0.2)
    assert _ask("I moved from Lisbon to Porto", lisbon, tea) == "UPDATE home"
    assert _ask("I moved from Paris to Rome", ("home", "I live in Lisbon", 0.4)) == "ADD"  # Paris never stored
    assert _ask("Did I tell you I moved to Porto?", lisbon) == "UPDATE home"  # a telling question
    assert _ask("Where do I live?", lisbon) == "IGNORE"
    assert states_something("Guess who got a new job at Spotify?")


@pytest.fixture(scope="module")
def memory():
    with MembrainMemory(background=False) as mem:
        yield mem


@pytest.mark.parametrize("old, new, question", [
    ("I live in Lisbon", "I moved from Lisbon to Porto", "where do I live?"),
    ("I work at Google", "I quit Google and joined Microsoft", "where do I work?"),
    ("I live in Leeds.", "I live in York now.", "where do I live?"),
    ("I have a cat named Tom", "Tom the cat passed away last week", "do I have a cat?"),
    ("I'm vegetarian", "I started eating fish again", "what's my diet?"),  # a state resumed
])
def test_a_correction_is_an_update_and_the_agent_finds_it(memory, old, new, question):
    ns = ("users", str(abs(hash(new))))
    key = memory.add(old, namespace=ns)
    assert memory.add(new, namespace=ns) == key  # UPDATE: the key holds the new statement
    assert [r.text for r in memory.history(key, namespace=ns)] == [old, new]  # nothing lost
    hits = memory.search(question, namespace=ns, min_score=DEFAULT_MIN_SCORE)
    assert hits and hits[0].text == new
    tool = {t.name: t for t in memory_tools(memory, ns)}["search_memory"]
    found = json.loads(tool.invoke({"query": question}))
    assert found[0]["content"] == new and found[0]["replaces"] == old and found[0]["date"]


def test_a_telling_question_is_stored_and_a_change_from_elsewhere_updates_nothing(memory):
    ns = ("users", "telling")
    key = memory.add("I live in Lisbon", namespace=ns)
    assert memory.add("Did I tell you I moved to Porto?", namespace=ns) == key  # the move it carries
    assert memory.add("I moved from Paris to Rome years ago", namespace=ns) != key  # Paris was never stored
    assert memory.get(key, namespace=ns).text == "Did I tell you I moved to Porto?"


def test_a_related_statement_leaves_the_earlier_fact_first(memory):
    ns = ("users", "brother")
    key = memory.add("I work at Microsoft", namespace=ns)
    assert memory.add("My brother just joined Microsoft", namespace=ns) != key
    hits = memory.search("where do I work?", namespace=ns)
    assert hits[0].key == key and hits[0].probably_superseded_by is None


@pytest.fixture(scope="module")
def two_adds():
    """Corrections stored as two memories (operations off, as an older database holds them)."""
    with MembrainMemory(background=False, operations=False) as mem:
        for text in ["I work at Google", "My sister plays the cello", "I like green tea", "I run on Sundays",
                     "I quit Google and joined Microsoft"]:
            mem.add(text, namespace="u")
        yield mem


def test_a_superseding_memory_is_placed_just_before_the_older_one(two_adds):
    hits = two_adds.search("Which company employs me at Google?", namespace="u", limit=1)
    texts = [h.text for h in hits]
    assert texts[:2] == ["I quit Google and joined Microsoft", "I work at Google"]  # beyond limit=1
    newer, older = hits[0], hits[1]
    assert older.probably_superseded_by == newer.key and newer.supersedes == older.key
    assert newer.score == older.score


def test_scores_never_rise_down_a_result_list(two_adds):
    for query in ["where do I work?", "music", "what do I drink?", "exercise", "Google"]:
        scores = [h.score for h in two_adds.search(query, namespace="u", limit=5)]
        assert scores == sorted(scores, reverse=True), query


def test_the_store_keeps_langgraphs_limit_with_the_newer_statement_first(two_adds):
    items = MembrainStore(two_adds).search(("u",), query="Which company employs me at Google?", limit=1)
    assert [i.value["content"] for i in items] == ["I quit Google and joined Microsoft"]


def test_the_agent_tool_marks_what_is_out_of_date(two_adds):
    tool = {t.name: t for t in memory_tools(two_adds, "u")}["search_memory"]
    found = json.loads(tool.invoke({"query": "Which company employs me at Google?", "limit": 1}))
    assert [h["content"] for h in found[:2]] == ["I quit Google and joined Microsoft", "I work at Google"]
    assert found[0]["replaces"] == "I work at Google" and found[1]["replaced_by"] == found[0]["id"]


def test_a_restatement_is_the_speakers_own_near_the_older_and_answers_as_well():
    assert speakers_own("I get the bus to the office now") and speakers_own("My GP is Dr Kapoor")
    assert speakers_own("Got promoted to team lead!")
    assert not speakers_own("My sister gets the bus") and not speakers_own("Kenji: I get the bus")
    assert not speakers_own("note 3 about things")
    new, old = "I get the bus to the office, the hill is too steep", "I cycle to the office every day"
    assert restates(new, old, 0.57, 0.26, 0.35)
    assert not restates(new, old, 0.40, 0.26, 0.35)  # not near enough to each other
    assert not restates(new, old, 0.57, 0.20, 0.35)  # answers the query much worse
    assert not restates("My sister gets the bus to the office", old, 0.57, 0.35, 0.35)


def test_a_newer_restatement_comes_first_unmarked():
    """Two statements of the speaker's own state, told apart with no change cue: the newer
    one first, the older kept, neither marked as replaced (the newer may only add to it)."""
    with MembrainMemory(background=False, operations=False) as mem:
        for text in ["I cycle to the office every day", "My sister plays the cello", "I like green tea",
                     "I get the bus to the office, the hill is too steep to cycle"]:
            mem.add(text, namespace="u")
        hits = mem.search("how do I get to work?", namespace="u", limit=2)
        assert [h.text for h in hits[:2]] == ["I get the bus to the office, the hill is too steep to cycle",
                                              "I cycle to the office every day"]
        assert all(h.probably_superseded_by is None and h.supersedes is None for h in hits)
        assert hits[0].score == hits[1].score


@pytest.mark.parametrize("text, carried", [
    ("Did I tell you I moved to Porto?", "I moved to Porto"), ("Did I say we split up?", "we split up"),
    ("Can you believe I sold the car?", "I sold the car"), ("Have you heard that Ines quit?", "Ines quit"),
    ("You'll never guess where I live now?", "where I live now"), ("did i tell u i got a new job", "i got a new job"),
    ("Did you see the match?", None), ("Have you seen my keys?", None), ("Can you believe it?", None)])
def test_a_telling_question_carries_its_statement_and_a_real_question_carries_none(text, carried):
    assert carried_statement(text) == carried


def test_texting_is_read_as_the_words_it_shortens():
    """"im at initech rn" states the change "I'm at Initech right now" does."""
    texted, written = "im at initech rn, the old place was awful", "I'm at Initech right now, the old place was awful"
    old = "I work at Globex"
    assert supersedes(texted, old, 0.35, runner_up=0.1) and supersedes(written, old, 0.35, runner_up=0.1)
    assert not supersedes(texted, old, 0.2) and not supersedes(written, old, 0.2)
    assert slots("living w/ my gf now") == {"home", "partner"}
    assert speakers_own("im seeing someone new rn")
    assert not change_cue("I have 2 cats")  # a number is no short form


def test_a_correction_updates_the_fact_it_changes_not_the_nearest_one():
    """Of two facts a statement could supersede, the UPDATE retires the one that says what it
    changes: "I'm no longer strictly vegan" changes "I'm vegan, strictly", not the vegan
    restaurant (which MiniLM puts nearer)."""
    op = conservative_operation(OperationQuestion(
        "I'm no longer strictly vegan; I eat eggs from my neighbour's hens.", None,
        (Candidate("restaurant", "I opened my own little vegan restaurant, so I'm head chef and owner now.", 0.58),
         Candidate("diet", "I'm vegan, strictly, no honey either.", 0.55))))
    assert op.kind == "UPDATE" and op.target == "diet"

