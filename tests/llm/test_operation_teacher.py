"""The memory-operation question to an LLM teacher, against the local chat-completions
server: the schema sent, a valid answer, a bad target retried then fallen back, and a
memory that stores everything when the LLM's answers are unusable."""

from __future__ import annotations

import numpy as np
import openai
from openai_server import answer, text

from langchain_membrain.insert.operations import ask_teacher
from langchain_membrain.teachers.openai_teacher import OpenAITeacher
from langchain_membrain.teachers.prompts import parse_data_block
from langchain_membrain.tree.operation_types import ADD, Candidate, Operation, OperationQuestion


def make_teacher(server, **options) -> OpenAITeacher:
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    return OpenAITeacher(client, "test-model", **{"timeout": 2.0, **options})


def question() -> OperationQuestion:
    cands = (Candidate("k-home", "I live in Paris.", 0.8, valid_from=0.0),
             Candidate("k-job", "I work as a nurse.", 0.3, valid_from=0.0))
    return OperationQuestion("We moved to Berlin last week.", np.ones(4, np.float32), cands)


def test_an_update_names_a_shown_fact(server):
    server.push(answer({"operation": "UPDATE", "target": 1, "keep": None}))
    teacher = make_teacher(server)
    assert teacher.choose_operation(question()) == Operation("UPDATE", "k-home")
    req = server.requests[0]
    assert req["response_format"]["json_schema"]["name"] == "OperationAnswer"
    data = parse_data_block(req["messages"][-1]["content"])
    assert data["new_item"] == "We moved to Berlin last week."
    assert [f["text"] for f in data["facts"]] == ["I live in Paris.", "I work as a nurse."]
    assert teacher.stats()["operation"]["calls"] == 1


def test_a_bad_target_is_retried_then_falls_back(server):
    server.push(answer({"operation": "DELETE", "target": 7, "keep": False}), text("{not json"))
    teacher = make_teacher(server)
    # the fallback's answer: the offline rule, sure here (a change cue, one clear old fact)
    assert teacher.choose_operation(question()) == Operation("UPDATE", "k-home")
    assert len(server.requests) == 2 and "target 7" in server.requests[1]["messages"][-1]["content"]
    stats = teacher.stats()["operation"]
    assert stats["failures"] == 2 and stats["fallbacks"] == 1


def test_a_memory_teacher_that_fails_gives_add(server):
    server.push(answer({"operation": "UPDATE", "target": None, "keep": None}),
                answer({"operation": "UPDATE", "target": 0, "keep": None}))
    teacher = make_teacher(server, raise_on_failure=True)  # as MembrainMemory builds it
    op, why = ask_teacher(teacher, question())
    assert op == ADD and why is not None


def test_one_call_answers_the_operation_and_the_placement(server, small_tree):
    """In one-call mode the operation question carries the tree's outline, and the operation
    it returns carries the placement (which the insert follows: one request)."""
    from dataclasses import replace

    def reply(request):
        outline = parse_data_block(request["messages"][-1]["content"])["outline"]
        laptops = next(e["number"] for e in outline if e.get("label") == "laptops")
        return answer({"operation": "ADD", "target": None, "keep": None, "parent": laptops, "actions": []})

    server.responder = reply
    teacher = make_teacher(server)
    q = replace(question(), text="A laptop hinge broke", tree=small_tree.copy())
    op = teacher.choose_operation(q)
    assert op == ADD and len(server.requests) == 1
    assert server.requests[0]["response_format"]["json_schema"]["name"] == "OperationPlaceAnswer"
    data = parse_data_block(server.requests[0]["messages"][-1]["content"])
    assert data["new_item"] == "A laptop hinge broke" and data["candidates"][0]["text"] == "I live in Paris."
    assert op.placement is not None and op.placement.parent_id == "a-laptops" and op.placement.actions == []
    assert teacher.stats()["place"]["calls"] == 0 and teacher.stats()["place"]["from_placement"] == 1


def test_one_call_update_needs_no_placement(server, small_tree):
    from dataclasses import replace

    server.push(answer({"operation": "UPDATE", "target": 2, "keep": None, "parent": None, "actions": None}))
    teacher = make_teacher(server)
    assert teacher.choose_operation(replace(question(), tree=small_tree)) == Operation("UPDATE", "k-job")
