"""The formation question to an LLM teacher (teachers/forming.py), against the local
chat-completions server and a LangChain fake chat model: the schema and the bounded prompt,
a valid answer stored as facts with their source, and malformed answers retried, then kept as
said."""

from __future__ import annotations

import warnings

import openai
import pytest
from helpers import WordEmbeddings
from llm_helpers import ToolFakeChatModel, tool_answer
from openai_server import answer, schema_name, text

from langchain_membrain import MembrainMemory
from langchain_membrain.insert.formation import FormationInput, FormationWarning
from langchain_membrain.teachers.forming import as_epoch
from langchain_membrain.teachers.llm import LLMTeacher
from langchain_membrain.teachers.openai_teacher import OpenAITeacher
from langchain_membrain.teachers.prompts import PROMPT_BUDGET_TOKENS, parse_data_block, prompt_tokens

TURN = "Caroline: I went to a LGBTQ support group yesterday and it was so powerful."
FORMED = {"facts": [{"text": "Caroline went to an LGBTQ support group on 7 May 2023", "valid_from": "2023-05-07",
                     "valid_to": None}],
          "experiences": [], "working": "Caroline tells Melanie about her support group."}


def teacher_for(server, **options) -> OpenAITeacher:
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    return OpenAITeacher(client, "test-model", **{"timeout": 2.0, "formation": True, **options})


def llm(formation_reply):
    """A scripted LLM: the formation question gets ``formation_reply`` (a reply, or the next of
    an iterator of replies); every other question
    (operation with placement, naming) a plain valid answer."""
    def respond(req):
        name = schema_name(req)
        if name == "FormationAnswer":
            return next(formation_reply) if hasattr(formation_reply, "__next__") else formation_reply
        if name == "OperationPlaceAnswer":
            return answer({"operation": "ADD", "target": None, "keep": None, "parent": 1, "actions": []})
        if name == "PlaceAnswer":
            return answer({"parent": 1, "actions": []})
        return answer({"label": "things"})
    return respond


def memory(teacher) -> MembrainMemory:
    return MembrainMemory(teacher=teacher, embeddings=WordEmbeddings(), background=False, relabel=False)


def test_an_llm_forms_facts_with_their_time_and_source(server):
    server.responder = llm(answer(FORMED))
    with memory(teacher_for(server)) as m:
        key = m.add(TURN, namespace="conv", metadata={"speaker": "Caroline", "session": 1, "date": "8 May 2023"})
        forming = [r for r in server.requests if schema_name(r) == "FormationAnswer"]
        assert len(forming) == 1
        shown = parse_data_block(forming[0]["messages"][-1]["content"])
        assert shown["input"] == TURN and shown["metadata"] == {"speaker": "Caroline", "session": 1,
                                                                "date": "8 May 2023"}
        fact = m.search("support group", namespace="conv", kinds="fact")[0]
        assert fact.sources == [key] and fact.valid_from == as_epoch("2023-05-07")
        assert m.get(key, namespace="conv").kind == "raw"
        assert m.working("conv", "1").text == FORMED["working"]
        stats = m.stats()
        assert stats["questions"]["formation"] == 1 == stats["teacher"]["formation"]["calls"]


def test_the_formation_prompt_stays_within_the_budget_for_a_huge_input(server):
    server.responder = llm(answer({"facts": [], "experiences": [], "working": None}))
    item = FormationInput("word " * 20_000, {"speaker": "A"}, "s", working="summary " * 5_000)
    teacher_for(server).form(item)
    assert prompt_tokens(server.requests[0]["messages"]) <= PROMPT_BUDGET_TOKENS


def test_a_malformed_answer_is_retried_then_the_input_is_kept_as_said(server):
    server.responder = llm(text("{not json"))
    with memory(teacher_for(server)) as m:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            key = m.add(TURN, namespace="conv")
        assert sum(issubclass(w.category, FormationWarning) for w in caught) == 1
        assert len([r for r in server.requests if schema_name(r) == "FormationAnswer"]) == 2  # one retry
        stored = m.get(key, namespace="conv")
        assert stored.kind == "fact" and stored.text == TURN  # as said: nothing lost
        assert m.stats()["questions"]["formation"] == 2  # both requests counted


def test_a_retry_with_the_error_quoted_recovers(server):
    replies = iter([answer({"facts": "not a list", "working": None}), answer(FORMED)])
    server.responder = llm(replies)
    with memory(teacher_for(server)) as m:
        key = m.add(TURN, namespace="conv")
        assert m.get(key, namespace="conv").kind == "raw"
        assert [h.sources for h in m.search("support", namespace="conv", kinds="fact")] == [[key]]


def test_an_llm_teacher_without_formation_asks_no_formation_question(server):
    server.responder = llm(answer(FORMED))
    with memory(teacher_for(server, formation=False)) as m:
        m.add(TURN, namespace="conv")
        assert all(schema_name(r) != "FormationAnswer" for r in server.requests)


@pytest.mark.parametrize("args, facts", [(FORMED, 1), ({"facts": [], "experiences": [], "working": None}, 0)])
def test_a_langchain_chat_model_forms_through_tool_calling(args, facts):
    def respond(messages, tools):
        if tools and tools[0]["function"]["name"] == "FormationAnswer":
            return tool_answer(tools, args)
        return tool_answer(tools, {"operation": "ADD", "target": None, "keep": None, "parent": 1, "actions": []})

    chat = ToolFakeChatModel(responder=respond)
    with memory(LLMTeacher(chat, formation=True, timeout=2.0)) as m:
        key = m.add(TURN, namespace="conv")
        assert m.get(key, namespace="conv").kind == "raw"
        assert m.tree("conv").fact_count(m.tree("conv").root_id) == facts


def test_a_batch_of_inputs_is_one_request_within_the_budget(server):
    seen = []

    def batch(req):
        data = parse_data_block(req["messages"][-1]["content"])
        seen.append(data)
        return answer({"inputs": [{"number": 2, "facts": [{"text": "Melanie paints sunsets", "valid_from": None,
                                                            "valid_to": None}], "experiences": []},
                                  {"number": 9, "facts": [], "experiences": ["invented"]}],
                       "working": "Melanie talks about painting"})(req)

    def respond(req):
        return batch if schema_name(req) == "FormationBatchAnswer" else llm(answer(FORMED))(req)

    server.responder = respond
    turns = ["Melanie: hi!", "Melanie: I paint sunsets " + "very " * 3000, "Caroline: lovely"]
    with memory(teacher_for(server)) as m:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            keys = m.add_many(turns, namespace="conv", session="1")
        batches = [r for r in server.requests if schema_name(r) == "FormationBatchAnswer"]
        assert len(batches) == 1 and prompt_tokens(batches[0]["messages"]) <= PROMPT_BUDGET_TOKENS
        assert [i["number"] for i in seen[0]["inputs"]] == [1, 2, 3]
        assert sum("was not shown" in str(w.message) for w in caught) == 1
        fact = m.search("paints sunsets", namespace="conv", kinds="fact")[0]
        assert fact.text == "Melanie paints sunsets" and fact.sources == [keys[1]]
        assert m.stats()["questions"]["formation"] == 1
