"""OpenAITeacher against the local chat-completions server: valid answers, every bad
answer kind, HTTP errors, timeouts, the concurrency limit and the stats."""

from __future__ import annotations

import asyncio
import json
import threading

import openai
import pytest
from helpers import insert_by_teacher
from llm_helpers import new_fact
from openai_server import answer, http_error, refusal, slow, text, truncated

from langchain_membrain.errors import TeacherError
from langchain_membrain.teachers.answers import TeacherCallError
from langchain_membrain.teachers.base import Subtree
from langchain_membrain.teachers.openai_teacher import OpenAITeacher
from langchain_membrain.teachers.prompts import parse_data_block
from langchain_membrain.tree.actions import Demote, Group, Promote
from langchain_membrain.tree.placement import stage1_candidates


def make_teacher(server, fallback=None, **options) -> OpenAITeacher:
    options.setdefault("timeout", 1.0)
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    return OpenAITeacher(client, "test-model", fallback=fallback, **{"mode": "per_decision", **options})


def root_subtree(tree) -> Subtree:
    return Subtree(tree, tree.root_id, stage1_candidates(tree, tree.root_id, None))  # root, laptops, desktops


def user_texts(request) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] == "user"]


# ------------------------------------------------------------------ valid answers
def test_valid_stage1_answer_and_protocol(server, small_tree, fallback):
    server.push(answer({"choice": 1}))
    teacher = make_teacher(server, fallback)
    assert teacher.choose_stage1(new_fact("A laptop hinge broke"), root_subtree(small_tree)) == 1
    req = server.requests[0]
    assert req["model"] == "test-model" and server.bad_requests == []
    fmt = req["response_format"]
    assert fmt["type"] == "json_schema" and fmt["json_schema"]["name"] == "Stage1Answer"
    assert fmt["json_schema"]["strict"] is True
    assert fmt["json_schema"]["schema"]["additionalProperties"] is False
    data = parse_data_block(user_texts(req)[0])
    assert data["new_fact"] == "A laptop hinge broke"
    assert [o["label"] for o in data["options"]] == ["computer", "laptops", "desktops"]
    assert data["options"][1]["path"] == ["computer", "laptops"]
    assert "The first laptop was sold in 1981" in data["options"][1]["examples"]
    stats = teacher.stats()["stage1"]
    assert stats["calls"] == 1 and stats["failures"] == 0 and stats["fallbacks"] == 0
    assert stats["prompt_tokens"] > 0 and stats["completion_tokens"] > 0 and stats["latency_s"] > 0
    assert fallback.calls == []


def test_valid_stage2_actions(server, small_tree, fallback):
    closure = small_tree.closure("f-first")  # self, f-keys, a-batteries, a-laptops, a-desktops, f-mouse, root
    assert closure.node_ids == ["f-first", "f-keys", "a-batteries", "a-laptops", "a-desktops", "f-mouse", "root"]
    server.push(answer({"actions": [
        {"type": "demote", "node": 1, "target": 2, "members": None, "label": None},
        {"type": "promote", "node": 0, "target": None, "members": None, "label": None},
    ]}))
    teacher = make_teacher(server, fallback)
    acts = teacher.choose_stage2(small_tree, closure)
    assert acts == [Demote("f-keys", "a-batteries"), Promote("f-first")]
    data = parse_data_block(user_texts(server.requests[0])[0])
    assert [(n["number"], n["role"]) for n in data["nodes"]][:3] == [(0, "new fact"), (1, "sibling"), (2, "sibling")]


def test_group_with_label_and_name_aspect(server, small_tree, fallback):
    small_tree.add_fact("a-laptops", "Laptop screens are 13 inches", node_id="f-screen", embedding=[1, 0, 0, 0])
    closure = small_tree.closure("f-screen")
    server.push(answer({"actions": [{"type": "group", "node": None, "target": None, "members": [0, 1],
                                     "label": "  'laptop parts'. "}]}),
                answer({"label": "laptop hardware"}))
    teacher = make_teacher(server, fallback)
    assert teacher.choose_stage2(small_tree, closure) == [Group(("f-screen", "f-first"), "laptop parts")]
    assert teacher.name_aspect(["a", "b"]) == "laptop hardware"


# ------------------------------------------------------------------ bad answers
@pytest.mark.parametrize("bad, kind", [
    (answer({"choice": 7}), "invalid"),  # out of range
    (answer({"choice": -1}), "invalid"),
    (text('{"choice": 1'), "malformed"),  # broken JSON
    (answer({"pick": 1}), "malformed"),  # wrong schema
    (refusal(), "refusal"),
    (truncated('{"cho'), "truncated"),
    (http_error(500), "http_error"),
])
def test_bad_stage1_answer_is_retried_once(server, small_tree, fallback, bad, kind):
    server.push(bad, answer({"choice": 2}))
    teacher = make_teacher(server, fallback)
    assert teacher.choose_stage1(new_fact("A desktop fan is loud"), root_subtree(small_tree)) == 2
    stats = teacher.stats()["stage1"]
    assert stats["calls"] == 2 and stats["retries"] == 1 and stats["failures"] == 1
    assert stats["failure_kinds"] == {kind: 1} and stats["fallbacks"] == 0
    assert fallback.calls == []
    retry_users = user_texts(server.requests[1])
    if kind in ("invalid", "malformed", "refusal", "truncated"):
        assert len(retry_users) == 2  # the question, then the rejection quoted back
        feedback = parse_data_block(retry_users[1])
        assert feedback["why_it_was_rejected"]
        if kind == "invalid":
            assert "not one of the numbers shown" in feedback["why_it_was_rejected"]
            assert json.loads(feedback["your_previous_answer"])["choice"] in (7, -1)
    else:
        assert len(retry_users) == 1  # transport failure: the same question again


def test_two_bad_answers_fall_back_and_count(server, small_tree, fallback):
    server.push(answer({"choice": 9}), answer({"choice": 9}))
    teacher = make_teacher(server, fallback)
    sub = root_subtree(small_tree)
    assert teacher.choose_stage1(new_fact("x"), sub) == len(sub.candidates) - 1  # the fallback's answer
    assert fallback.calls == ["stage1"]
    stats = teacher.stats()["stage1"]
    assert stats["failures"] == 2 and stats["fallbacks"] == 1 and stats["calls"] == 2
    with pytest.raises(TeacherCallError) as err:  # try_* raises instead of falling back
        server.push(answer({"choice": 9}), answer({"choice": 9}))
        teacher.try_stage1(new_fact("x"), sub)
    assert err.value.kind == "invalid" and isinstance(err.value, TeacherError)


@pytest.mark.parametrize("bad_action, why", [
    ({"type": "demote", "node": 0, "target": 42, "members": None, "label": None}, "not a node number"),
    ({"type": "demote", "node": 0, "target": 3, "members": None, "label": None}, "breaks the tree's rules"),
    ({"type": "promote", "node": None, "target": None, "members": None, "label": None}, "not a node number"),
    ({"type": "group", "node": None, "target": None, "members": [0], "label": "x"}, "two or more"),
    ({"type": "group", "node": None, "target": None, "members": [0, 2], "label": "x"}, "breaks the tree's rules"),
])
def test_bad_stage2_actions_are_rejected(server, small_tree, fallback, bad_action, why):
    # closure of f-mouse (under the root): self, a-laptops, a-desktops, root; no grandparent
    closure = small_tree.closure("f-mouse")
    server.push(answer({"actions": [bad_action]}), answer({"actions": []}))
    teacher = make_teacher(server, fallback)
    assert teacher.choose_stage2(small_tree, closure) == []
    feedback = parse_data_block(user_texts(server.requests[1])[1])["why_it_was_rejected"]
    assert why in feedback
    assert teacher.stats()["stage2"]["failure_kinds"] == {"invalid": 1}


def test_promote_without_grandparent_and_double_use_rejected(server, small_tree, fallback):
    closure = small_tree.closure("f-mouse")
    promote = {"type": "promote", "node": 0, "target": None, "members": None, "label": None}
    server.push(answer({"actions": [promote]}))
    closure2 = small_tree.closure("f-first")
    twice = [{"type": "promote", "node": 0, "target": None, "members": None, "label": None},
             {"type": "demote", "node": 0, "target": 2, "members": None, "label": None}]
    server.push(answer({"actions": twice}))
    teacher = make_teacher(server, fallback, max_retries=0)
    assert teacher.choose_stage2(small_tree, closure) == []
    assert teacher.choose_stage2(small_tree, closure2) == []
    assert teacher.stats()["stage2"]["fallbacks"] == 2 and fallback.calls == ["stage2", "stage2"]


def test_name_aspect_too_long_then_fallback(server, fallback):
    server.push(answer({"label": "a label of far too many words"}), answer({"label": ""}))
    teacher = make_teacher(server, fallback)
    assert teacher.name_aspect(["one", "two"]) == "fallback label"
    assert teacher.stats()["name"]["failure_kinds"] == {"invalid": 2}


# ------------------------------------------------------------- transport errors
def test_429_then_success_with_sdk_retries_off(server, small_tree, fallback):
    server.push(http_error(429, retry_after=0), answer({"choice": 1}))
    teacher = make_teacher(server, fallback)
    assert teacher.choose_stage1(new_fact("laptop"), root_subtree(small_tree)) == 1
    assert len(server.requests) == 2  # one by the teacher's retry, none by the SDK
    assert teacher.stats()["stage1"]["failure_kinds"] == {"rate_limit": 1}


def test_500_twice_falls_back_after_exactly_two_requests(server, small_tree, fallback):
    server.push(http_error(500), http_error(500))
    teacher = make_teacher(server, fallback)
    sub = root_subtree(small_tree)
    assert teacher.choose_stage1(new_fact("laptop"), sub) == len(sub.candidates) - 1
    assert len(server.requests) == 2
    assert teacher.stats()["stage1"]["failure_kinds"] == {"http_error": 2}


def test_slow_answer_times_out_and_falls_back(server, small_tree, fallback):
    server.push(slow(1.5, answer({"choice": 1})), slow(1.5, answer({"choice": 1})))
    teacher = make_teacher(server, fallback, timeout=0.2)
    sub = root_subtree(small_tree)
    assert teacher.choose_stage1(new_fact("laptop"), sub) == len(sub.candidates) - 1
    assert teacher.stats()["stage1"]["failure_kinds"] == {"timeout": 2}


async def test_async_paths(server, small_tree, fallback):
    server.push(answer({"choice": 2}), slow(1.0, answer({"choice": 1})), slow(1.0, answer({"choice": 1})),
                answer({"actions": []}), answer({"label": "gpus"}))
    teacher = make_teacher(server, fallback, timeout=0.2)
    sub = root_subtree(small_tree)
    assert await teacher.achoose_stage1(new_fact("desktop"), sub) == 2
    assert await teacher.achoose_stage1(new_fact("desktop"), sub) == len(sub.candidates) - 1  # timed out
    assert await teacher.achoose_stage2(small_tree, small_tree.closure("f-mouse")) == []
    assert await teacher.aname_aspect(["GPU one", "GPU two"]) == "gpus"
    s = teacher.stats()
    assert s["stage1"]["failure_kinds"] == {"timeout": 2} and s["stage1"]["fallbacks"] == 1
    assert s["total"]["calls"] == 5


async def test_concurrency_limit_shared_by_sync_and_async(server, small_tree, fallback):
    server.responder = lambda req: slow(0.15, answer({"choice": 1}))
    teacher = make_teacher(server, fallback, max_concurrency=1)
    sub = root_subtree(small_tree)
    results: list[int] = []
    th = threading.Thread(target=lambda: results.append(teacher.choose_stage1(new_fact("a"), sub)))
    th.start()
    results += await asyncio.gather(*(teacher.achoose_stage1(new_fact("b"), sub) for _ in range(2)))
    await asyncio.to_thread(th.join)
    assert results == [1, 1, 1]
    assert server.max_inflight == 1


async def test_concurrency_above_one_overlaps(server, small_tree, fallback):
    server.responder = lambda req: slow(0.15, answer({"choice": 1}))
    teacher = make_teacher(server, fallback, max_concurrency=3)
    sub = root_subtree(small_tree)
    await asyncio.gather(*(teacher.achoose_stage1(new_fact("b"), sub) for _ in range(3)))
    assert server.max_inflight >= 2


# ---------------------------------------------------------------------- config
def test_from_env(monkeypatch, server):
    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "k")
    monkeypatch.setenv("MEMBRAIN_TEACHER_MODEL", "env-model")
    teacher = OpenAITeacher.from_env(timeout=1.0)
    assert teacher.model == "env-model" and str(teacher.client.base_url).startswith(server.base_url)
    assert teacher.client.max_retries == 0 and str(teacher.async_client.base_url).startswith(server.base_url)
    server.push(answer({"label": "env works"}))
    assert teacher.name_aspect(["x"]) == "env works"
    monkeypatch.delenv("MEMBRAIN_TEACHER_MODEL")
    with pytest.raises(TeacherError):
        OpenAITeacher.from_env()


def test_json_object_mode_puts_schema_in_prompt(server, fallback):
    server.push(answer({"label": "cpus"}))
    teacher = make_teacher(server, fallback, response_format="json_object")
    assert teacher.name_aspect(["CPU a", "CPU b"]) == "cpus"
    req = server.requests[0]
    assert req["response_format"] == {"type": "json_object"}
    assert '"label"' in req["messages"][0]["content"]


def test_default_fallback_is_the_heuristic_teacher(server):
    teacher = OpenAITeacher(openai.OpenAI(base_url=server.base_url, api_key="x"), "m", mode="per_decision")
    assert type(teacher.fallback).__name__ in {"HeuristicTeacher", "LastResortTeacher"}


# ------------------------------------------------------------ the fact is kept
def test_insert_never_fails_and_keeps_the_fact(server, small_tree):
    server.responder = lambda req: http_error(500)
    teacher = make_teacher(server, None, timeout=0.5)  # fallback=None: the last-resort rule
    before = len(small_tree.facts())
    fid = insert_by_teacher(small_tree, new_fact("A laptop fan whirs"), teacher)
    assert fid in small_tree and small_tree.node(fid).text == "A laptop fan whirs"
    assert len(small_tree.facts()) == before + 1
    small_tree.check_invariants()
    s = teacher.stats()
    # the joint question and its retry fail (the fallback places the fact); the deferred
    # question, asked again by the supervision, is the third failure in a row: the breaker
    # opens and its retry is not sent
    assert s["place"]["calls"] == 3 and s["place"]["fallbacks"] == 2 and s["total"]["calls"] == 3
    assert teacher.health()["state"] == "open"
