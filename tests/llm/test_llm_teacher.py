"""LLMTeacher: unit tests on a LangChain fake chat model with tool calling, then through
langchain-openai's ChatOpenAI against the local server (tool calls and json_schema)."""

from __future__ import annotations

import threading

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from langchain_openai import ChatOpenAI
from llm_helpers import new_fact, tool_answer
from openai_server import answer, http_error, refusal, slow, text, truncated

from langchain_membrain.errors import ConfigurationError, TeacherError
from langchain_membrain.teachers.base import Subtree
from langchain_membrain.teachers.llm import LLMTeacher
from langchain_membrain.teachers.prompts import parse_data_block
from langchain_membrain.tree.actions import Demote, Group, Promote
from langchain_membrain.tree.placement import stage1_candidates


def root_subtree(tree) -> Subtree:
    return Subtree(tree, tree.root_id, stage1_candidates(tree, tree.root_id, None))


# ------------------------------------------------------------- fake chat model
def test_fake_model_stage1_stage2_and_name(fake_model_factory, small_tree, fallback):
    answers = {
        "Stage1Answer": {"choice": 2},
        "Stage2Answer": {"actions": [
            {"type": "group", "node": None, "target": None, "members": [0, 1], "label": "old laptops"},
        ]},
        "AspectName": {"label": "desktop parts"},
    }
    model = fake_model_factory(lambda msgs, tools: tool_answer(tools, answers[tools[0]["function"]["name"]]))
    teacher = LLMTeacher(model, mode="per_decision", fallback=fallback)
    assert teacher.choose_stage1(new_fact("desktop"), root_subtree(small_tree)) == 2
    assert teacher.choose_stage2(small_tree, small_tree.closure("f-first")) == [
        Group(("f-first", "f-keys"), "old laptops")]
    assert teacher.name_aspect(["x", "y"]) == "desktop parts"
    s = teacher.stats()
    assert s["total"]["calls"] == 3 and s["total"]["prompt_tokens"] == 150 and s["total"]["completion_tokens"] == 15
    assert fallback.calls == []


def test_a_group_past_the_height_bound_is_left_out_not_retried(fake_model_factory, small_tree, fallback):
    """Under max_height 2 there is no room for an aspect under "laptops": the model's Group
    there is dropped, not treated as a bad answer (no second call, no fallback)."""
    spec = {"actions": [{"type": "group", "node": None, "target": None, "members": [0, 1], "label": "old"}]}
    model = fake_model_factory(lambda m, t: tool_answer(t, spec))
    teacher = LLMTeacher(model, mode="per_decision", fallback=fallback)
    assert teacher.choose_stage2(small_tree, small_tree.closure("f-first")) == [Group(("f-first", "f-keys"), "old")]
    small_tree.max_height = 2
    assert teacher.choose_stage2(small_tree, small_tree.closure("f-first")) == []
    assert len(model.seen) == 2 and fallback.calls == []


def test_fake_model_promote_in_deep_closure(fake_model_factory, small_tree, fallback):
    closure = small_tree.closure("f-batt")  # self, batteries, laptops(f-first, f-keys, ...), grandparent laptops
    assert closure.node_ids[:3] == ["f-batt", "a-batteries", "f-first"]
    spec = {"actions": [{"type": "promote", "node": 0, "target": None, "members": None, "label": None}]}
    teacher = LLMTeacher(fake_model_factory(lambda m, t: tool_answer(t, spec)), mode="per_decision", fallback=fallback)
    assert teacher.choose_stage2(small_tree, closure) == [Promote("f-batt")]


def test_fake_model_bad_then_good_quotes_the_error(fake_model_factory, small_tree, fallback):
    replies = iter([{"choice": 5}, {"choice": 1}])
    model = fake_model_factory(lambda m, t: tool_answer(t, next(replies)))
    teacher = LLMTeacher(model, mode="per_decision", fallback=fallback)
    assert teacher.choose_stage1(new_fact("laptop"), root_subtree(small_tree)) == 1
    retry = model.seen[1]
    assert len(retry) == 3 and "choice 5 is not one of the numbers shown" in retry[2].content


def test_fake_model_text_instead_of_tool_call(fake_model_factory, small_tree, fallback):
    model = fake_model_factory(lambda m, t: AIMessage(content="I think laptops, number 1."))
    teacher = LLMTeacher(model, mode="per_decision", fallback=fallback)
    sub = root_subtree(small_tree)
    assert teacher.choose_stage1(new_fact("laptop"), sub) == len(sub.candidates) - 1
    assert teacher.stats()["stage1"]["failure_kinds"] == {"malformed": 2}


def test_model_raising_is_counted_not_raised(fake_model_factory, small_tree, fallback):
    def boom(m, t):
        raise RuntimeError("model crashed")
    teacher = LLMTeacher(fake_model_factory(boom), mode="per_decision", fallback=fallback)
    assert teacher.choose_stage2(small_tree, small_tree.closure("f-mouse")) == []
    assert teacher.stats()["stage2"]["failure_kinds"] == {"error": 2} and fallback.calls == ["stage2"]


def test_sync_timeout_on_a_slow_model(fake_model_factory, small_tree, fallback):
    """The model answers only when the test lets it, after the question has been answered:
    the call gave up at its timeout instead of waiting for the model (no sleep, no clock)."""
    asked, release = threading.Event(), threading.Event()
    answered: list[bool] = []

    def stuck(m, t):
        asked.set()
        release.wait(30)
        answered.append(True)
        return tool_answer(t, {"choice": 1})
    teacher = LLMTeacher(fake_model_factory(stuck), mode="per_decision", fallback=fallback, timeout=0.1, max_retries=0)
    sub = root_subtree(small_tree)
    try:
        assert teacher.choose_stage1(new_fact("laptop"), sub) == len(sub.candidates) - 1
        assert asked.is_set() and answered == []  # the model was asked and has not answered yet
        assert teacher.stats()["stage1"]["failure_kinds"] == {"timeout": 1}
    finally:
        release.set()
        teacher.close()


def test_model_without_structured_output_is_a_typed_error():
    with pytest.raises(TeacherError):
        LLMTeacher(GenericFakeChatModel(messages=iter(())))


def test_invalid_options(fake_model_factory):
    model = fake_model_factory(lambda m, t: AIMessage(content=""))
    with pytest.raises(ValueError):
        LLMTeacher(model, mode="sometimes")
    with pytest.raises(ValueError):
        LLMTeacher(model, timeout=0)


# ----------------------------------------------------- ChatOpenAI over HTTP
def chat(server, **kw) -> ChatOpenAI:
    return ChatOpenAI(model="test-model", base_url=server.base_url, api_key="x", max_retries=0, timeout=2, **kw)


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
def test_chat_openai_valid_answers(server, small_tree, fallback, method):
    server.push(answer({"choice": 1}),
                answer({"actions": [{"type": "demote", "node": 1, "target": 2, "members": None, "label": None}]}))
    teacher = LLMTeacher(chat(server), method=method, mode="per_decision", fallback=fallback)
    assert teacher.choose_stage1(new_fact("laptop"), root_subtree(small_tree)) == 1
    assert teacher.choose_stage2(small_tree, small_tree.closure("f-first")) == [Demote("f-keys", "a-batteries")]
    assert server.bad_requests == []
    req = server.requests[0]
    if method == "function_calling":
        assert req["tools"][0]["function"]["name"] == "Stage1Answer"
    else:
        assert req["response_format"]["type"] == "json_schema"
    s = teacher.stats()
    assert s["total"]["calls"] == 2 and s["total"]["prompt_tokens"] > 0 and s["total"]["completion_tokens"] > 0
    assert fallback.calls == []


@pytest.mark.parametrize("method", ["function_calling", "json_schema"])
@pytest.mark.parametrize("bad, kinds", [
    (text("not json at all"), {"malformed"}),
    (refusal(), {"refusal"}),
    (truncated('{"choice": '), {"truncated"}),
    (http_error(429, retry_after=0), {"rate_limit"}),
    (http_error(500), {"http_error"}),
])
def test_chat_openai_bad_answers_fall_back(server, small_tree, fallback, method, bad, kinds):
    server.push(bad, bad)
    teacher = LLMTeacher(chat(server), method=method, mode="per_decision", fallback=fallback)
    sub = root_subtree(small_tree)
    assert teacher.choose_stage1(new_fact("laptop"), sub) == len(sub.candidates) - 1
    s = teacher.stats()["stage1"]
    assert s["calls"] == 2 and len(server.requests) == 2 and s["fallbacks"] == 1
    assert set(s["failure_kinds"]) <= kinds and sum(s["failure_kinds"].values()) == 2


def test_chat_openai_429_then_success(server, small_tree, fallback):
    server.push(http_error(429, retry_after=0), answer({"choice": 2}))
    teacher = LLMTeacher(chat(server), method="json_schema", mode="per_decision", fallback=fallback)
    assert teacher.choose_stage1(new_fact("desktop"), root_subtree(small_tree)) == 2
    assert teacher.stats()["stage1"]["failure_kinds"] == {"rate_limit": 1}


async def test_chat_openai_async_timeout(server, small_tree, fallback):
    server.push(slow(1.5, answer({"choice": 1})), answer({"choice": 2}))
    teacher = LLMTeacher(chat(server), method="json_schema", mode="per_decision", fallback=fallback, timeout=0.2)
    assert await teacher.achoose_stage1(new_fact("desktop"), root_subtree(small_tree)) == 2
    assert teacher.stats()["stage1"]["failure_kinds"] == {"timeout": 1}


def test_retry_message_reaches_the_server(server, small_tree, fallback):
    server.push(answer({"choice": 3}), answer({"choice": 0}))
    teacher = LLMTeacher(chat(server), method="json_schema", mode="per_decision", fallback=fallback)
    assert teacher.choose_stage1(new_fact("mouse"), root_subtree(small_tree)) == 0
    users = [m["content"] for m in server.requests[1]["messages"] if m["role"] == "user"]
    assert "not one of the numbers shown (0 to 2)" in parse_data_block(users[1])["why_it_was_rejected"]


def test_as_teacher(server, fallback):
    from langchain_membrain.teachers.resolve import as_teacher

    teacher = as_teacher(chat(server), method="json_schema", mode="one_call", fallback=fallback)
    assert isinstance(teacher, LLMTeacher) and teacher.mode == "one_call"
    assert as_teacher(fallback) is fallback and as_teacher(None) is None
    with pytest.raises(ConfigurationError, match="provider:model"):
        as_teacher("gpt-4o")
    with pytest.raises(TypeError):
        as_teacher(42)
