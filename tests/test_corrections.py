"""Corrections win offline (issue 47): the operation student never decides alone an item
that may correct a near fact (a change cue), and among a search's hits a newer near
statement ranks before the older one, which is kept and marked probably superseded.
"""

from __future__ import annotations

import pytest
from helpers import WordEmbeddings

from langchain_membrain import MembrainMemory
from langchain_membrain.index.facts import RetrievalConfig
from langchain_membrain.retrieval.recency import RECENCY_SIMILARITY, resolve_recency
from langchain_membrain.students.operation import may_correct
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.teachers.operation_rule import conservative_operation, has_change_cue
from langchain_membrain.tree.operation_types import Candidate, OperationQuestion

NIGHT = "I work night shifts at the hospital"
DAYS = "I don't work night shifts anymore, I moved to days"


@pytest.mark.parametrize("text, cue", [
    (DAYS, True), ("I'm no longer vegan", True), ("We switched to oat milk", True),
    ("I'm not driving any more", True), ("No more marathons for me", True),
    ("These days it's weaving", True), ("I work night shifts at the hospital", False),
    ("I like tea", False)])
def test_change_cues(text, cue):
    assert has_change_cue(text) is cue


def _question(text: str, similarity: float) -> OperationQuestion:
    return OperationQuestion(text, None, (Candidate("old", NIGHT, similarity),))


def test_may_correct_needs_a_cue_and_a_near_fact():
    assert may_correct(_question(DAYS, 0.7))
    assert not may_correct(_question(DAYS, 0.2))  # nothing near: a new memory
    assert not may_correct(_question("I work at the hospital", 0.9))  # no change stated
    assert not may_correct(OperationQuestion(DAYS, None, ()))


def test_the_night_shift_correction_comes_first_offline():
    """The issue's example on the embedded defaults: the student's gate is open (its prior),
    yet the correction goes to the offline rule, which supersedes the night shift."""
    with MembrainMemory(background=False) as mem:
        old = mem.add(NIGHT, namespace="u")
        mem.add(DAYS, namespace="u")
        decision = mem.last_operation
        assert decision is not None and decision.asked and decision.by == "teacher"
        assert decision.operation.kind == "UPDATE" and decision.operation.target == old
        hits = mem.search("what shifts do I work?", namespace="u")
        assert hits[0].text == DAYS
        assert [r.text for r in mem.history(old, namespace="u")] == [NIGHT, DAYS]  # nothing lost
        kinds = mem.stats()["operations"]["per_kind"]
        assert kinds["UPDATE"]["teacher"] == 1


def test_recency_ranks_the_newer_near_statement_first_and_keeps_the_older():
    with MembrainMemory(embeddings=WordEmbeddings(), background=False, prior=False, relabel=False,
                        operations=False) as mem:
        mem.add("I live in a flat in Leeds with my sister", namespace="u")
        mem.add("I live in a flat in York now", namespace="u")
        mem.add("My sister plays the cello", namespace="u")
        hits = mem.search("where do I live in Leeds", namespace="u", limit=5)
        texts = [h.text for h in hits]
        assert texts[0] == "I live in a flat in York now"
        older = hits[texts.index("I live in a flat in Leeds with my sister")]
        assert older.status == "current" and older.probably_superseded_by == hits[0].key
        assert all(0.0 <= h.score <= 1.0 for h in hits)


def test_recency_is_on_for_the_offline_rule_only():
    class Answers(HeuristicTeacher):
        def choose_operation(self, question):  # an operation teacher, as an LLM is
            return conservative_operation(question)

    assert resolve_recency(RetrievalConfig(), HeuristicTeacher()).recency_similarity == RECENCY_SIMILARITY
    assert resolve_recency(RetrievalConfig(), Answers()).recency_similarity == 0.0
    assert RetrievalConfig.for_chat().recency_similarity == 0.0
    assert resolve_recency(RetrievalConfig(recency_similarity=0.7), Answers()).recency_similarity == 0.7
