"""Batch questions: inserts the student is unsure of wait where it put them, and one request
about several of them places and tidies them all (LearnerConfig.batch). Against the local
OpenAI-protocol server (a keyword "LLM" that reads the prompt) and the topic teacher."""

from __future__ import annotations

import math

import openai
import pytest
from openai_server import schema_name, text
from test_placement_e2e import EMB, EXPECTED, FACTS, keyword_llm, shape

from langchain_membrain import LearnerConfig, MembrainMemory, Policy
from langchain_membrain.bench.topic_teacher import TopicTeacher

FORCED = dict(stage1=Policy(execute="teacher"), stage2=Policy(execute="teacher"))


def memory(server, batch: int | None, **kw) -> MembrainMemory:
    client = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=2)
    return MembrainMemory(teacher=client, teacher_model="test-model", embeddings=EMB, operations=False,
                          learner=LearnerConfig(batch=batch, **FORCED), relabel=False, dedupe=False,
                          prior=False, **kw)


@pytest.mark.parametrize("background", [False, True])
def test_one_request_places_several_facts_into_the_tree_one_by_one_would_build(server, background):
    """The teacher decides every insert; asked in batches of 4 it builds the tree it builds
    when asked about each insert alone, with a quarter of the placement requests."""
    server.responder = keyword_llm
    with memory(server, 4, background=background) as mem:
        mem.add_many(FACTS, namespace="computer")
        mem.flush()
        tree = mem.tree("computer")
        tree.check_invariants()
        assert shape(tree)[1] == EXPECTED[1]
        stats = mem.stats()
    names = [schema_name(r) for r in server.requests]
    # the first insert has nothing to decide (an empty tree); the other seven wait: 4 + 3 (flush)
    assert names.count("PlaceBatchAnswer") == math.ceil((len(FACTS) - 1) / 4)
    assert set(names) <= {"PlaceBatchAnswer", "AspectName"}
    assert stats["questions"]["placement"] == names.count("PlaceBatchAnswer")
    assert stats["teacher_failures"] == 0


def test_batch_one_asks_each_insert_on_its_own(server):
    server.responder = keyword_llm
    with memory(server, 1, background=False) as mem:
        mem.add_many(FACTS, namespace="computer")
        assert shape(mem.tree("computer"))[1] == EXPECTED[1]
    names = [schema_name(r) for r in server.requests]
    assert "PlaceBatchAnswer" not in names and names.count("PlaceAnswer") == len(FACTS) - 1


@pytest.mark.parametrize("bad", [
    text("not json"),
    text('{"placements": []}'),  # no entry per fact
    text('{"placements": [{"fact": 2, "parent": 99, "actions": []}]}'),
])
def test_an_unusable_batch_answer_keeps_every_fact(server, bad):
    """A batch answer that does not parse, misses facts or names no node: a counted failure;
    every fact stays stored and searchable where the student put it."""
    server.responder = lambda req: bad if schema_name(req) == "PlaceBatchAnswer" else keyword_llm(req)
    with memory(server, 4, background=False) as mem:
        mem.add_many(FACTS, namespace="computer")
        mem.flush()
        tree = mem.tree("computer")
        tree.check_invariants()
        assert sorted(tree.node(f).text for f in tree.facts()) == sorted(FACTS)
        assert mem.search("laptop battery", namespace="computer", limit=3)
        stats = mem.stats()
    assert stats["teacher_failures"] >= 1
    # every request the server saw is a counted question or a counted retry
    assert len(server.requests) == stats["teacher"]["total"]["calls"]


def test_a_waiting_fact_deleted_before_its_batch_is_left_out(server):
    server.responder = keyword_llm
    with memory(server, 4, background=False) as mem:
        keys = [mem.add(f, namespace="computer") for f in FACTS[:3]]
        assert mem.stats()["waiting_for_batch"] == 2  # the first had nothing to decide
        mem.delete(keys[1], namespace="computer")
        mem.flush()
        assert mem.stats()["waiting_for_batch"] == 0
        tree = mem.tree("computer")
        tree.check_invariants()
        assert sorted(tree.node(f).text for f in tree.facts()) == sorted([FACTS[0], FACTS[2]])
        assert mem.stats()["teacher_failures"] == 0


def test_the_topic_teacher_answers_batches_with_the_tree_it_builds_alone():
    """TopicTeacher.place_batch (sequential_placements): the same tree as one question per
    insert, in fewer questions."""
    from helpers import WordEmbeddings

    facts = [("health", "dentist cleaned my teeth"), ("money", "savings account pays well"),
             ("health", "dentist said teeth are fine"), ("money", "savings goal is a bike"),
             ("health", "sleep tracker says six hours"), ("money", "rent went up in may")]
    teacher = TopicTeacher({t: [topic] for topic, t in facts})

    def build(batch: int):
        with MembrainMemory(embeddings=WordEmbeddings(), teacher=teacher, learner=LearnerConfig(batch=batch, **FORCED),
                            operations=False, relabel=False, prior=False, background=False) as mem:
            for _, t in facts:
                mem.add(t, namespace="ana")
            mem.flush()
            tree = mem.tree("ana")
            groups = {tree.node(a).text: sorted(tree.node(f).text for f in tree.facts_below(a))
                      for a in tree.child_aspects(tree.root_id)}
            return groups, mem.stats()["questions"]["placement"]

    alone, asked_alone = build(1)
    batched, asked_batched = build(4)
    assert batched == alone and set(alone) == {"health", "money"}
    assert asked_batched < asked_alone


def test_batch_is_validated():
    for bad in (0, -1, 17, True, 2.5):
        with pytest.raises(ValueError):
            LearnerConfig(batch=bad)
