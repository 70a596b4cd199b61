"""The sync and async methods of a guarded teacher run one core (guard.py, "the sans-I/O
core"): the same question with the same scripted answers must give the same decision, send
the same requests and count the same in ``stats()``, whichever path asks it."""

from __future__ import annotations

from typing import Any, Callable

import openai
import pytest
from llm_helpers import RecordingFallback, new_fact
from openai_server import answer, http_error, slow, text
from test_placement_e2e import keyword_llm

from langchain_membrain.teachers.answers import TeacherCallError
from langchain_membrain.teachers.base import Subtree
from langchain_membrain.teachers.openai_teacher import OpenAITeacher
from langchain_membrain.tree.placement import stage1_candidates
from langchain_membrain.tree.tree import MembrainTree


def subtree(tree: MembrainTree, node_id: str | None = None) -> Subtree:
    node_id = node_id or tree.root_id
    return Subtree(tree, node_id, stage1_candidates(tree, node_id, None))


# A scenario asks its questions through ``ask(name, *args)``, which calls the sync method
# ``name`` or awaits its async twin ``a<name>``: written once, run on both paths.
Ask = Callable[..., Any]


async def stage1(ask: Ask, tree: MembrainTree) -> Any:
    return await ask("choose_stage1", new_fact("A laptop hinge broke"), subtree(tree))


async def try_stage1(ask: Ask, tree: MembrainTree) -> Any:
    return await ask("try_stage1", new_fact("A laptop hinge broke"), subtree(tree))


async def stage2(ask: Ask, tree: MembrainTree) -> Any:
    return await ask("choose_stage2", tree, tree.closure("f-mouse"))


async def name(ask: Ask, tree: MembrainTree) -> Any:
    return await ask("name_aspect", ["GPU one", "GPU two"])


async def place(ask: Ask, tree: MembrainTree) -> Any:
    p = await ask("place", new_fact("Laptop battery cells degrade"), tree)
    return p.parent_id, p.path, p.actions, p.fell_back


async def one_call_insert(ask: Ask, tree: MembrainTree) -> Any:
    """choose_stage1 down two levels (one joint question, then the cached placement), then
    choose_stage2 read from the same placement."""
    nf = new_fact("Laptop battery chargers get warm")
    first = await ask("choose_stage1", nf, subtree(tree))
    second = await ask("choose_stage1", nf, subtree(tree, "a-laptops"))
    fid = tree.add_fact("a-batteries", nf.text, embedding=nf.embedding, node_id="f-new")
    return first, second, await ask("choose_stage2", tree, tree.closure(fid))


CASES = [
    # (scenario, teacher options, scripted replies; None: the keyword LLM answers)
    (stage1, {}, [answer({"choice": 1})]),
    (stage1, {}, [text("not json at all"), answer({"choice": 2})]),  # retried, the error quoted
    (stage1, {}, [answer({"choice": 9}), answer({"choice": 7})]),  # both invalid: the fallback
    (stage1, {}, [http_error(429, retry_after=0.05), answer({"choice": 1})]),  # waits, then retries
    (stage1, {"timeout": 0.2}, [slow(1.0, answer({"choice": 1})), slow(1.0, answer({"choice": 1}))]),
    (try_stage1, {}, [http_error(500), http_error(500)]),  # try_* raises instead of falling back
    (stage1, {"raise_on_failure": True}, [answer({"choice": 9}), answer({"choice": 9})]),
    (stage2, {}, [answer({"actions": []})]),
    (stage2, {}, [answer({"actions": [{"type": "promote", "node": 0, "target": None, "members": None,
                                       "label": None}]}), answer({"actions": []})]),  # no grandparent
    (name, {}, [answer({"label": "a label that is far too long"}), answer({"label": "gpus"})]),
    (name, {}, [http_error(500), http_error(500)]),
    (place, {"mode": "one_call"}, None),
    (place, {"mode": "one_call"}, [text("{"), text("{")]),  # the fallback's descent
    (one_call_insert, {"mode": "one_call"}, None),
]


def make_ask(teacher: OpenAITeacher, is_async: bool) -> Ask:
    async def ask(method: str, *args: Any) -> Any:
        try:
            if is_async:
                return await getattr(teacher, "a" + method)(*args)
            return getattr(teacher, method)(*args)
        except TeacherCallError as exc:
            return "raised", exc.kind, exc.detail, exc.answer
    return ask


def counts(teacher: OpenAITeacher) -> dict[str, Any]:
    """``stats()`` without the latencies (wall-clock, so never equal)."""
    out = teacher.stats()
    for value in out.values():
        if isinstance(value, dict):
            value.pop("latency_s")
            value.pop("mean_latency_s")
    return out


@pytest.mark.parametrize("scenario, options, script", CASES,
                         ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
async def test_sync_and_async_paths_agree(server, small_tree, scenario, options, script):
    runs = []
    for is_async in (False, True):
        server.requests.clear()
        if script is None:
            server.responder = keyword_llm
        else:
            server.push(*script)
        fallback = RecordingFallback()
        options = {"mode": "per_decision", "timeout": 1.0, **options}
        teacher = OpenAITeacher(openai.OpenAI(base_url=server.base_url, api_key="x"), "test-model",
                                async_client=openai.AsyncOpenAI(base_url=server.base_url, api_key="x"),
                                fallback=fallback, **options)
        tree = small_tree.copy()
        result = await scenario(make_ask(teacher, is_async), tree)
        runs.append((result, counts(teacher), [r["messages"] for r in server.requests], fallback.calls))
        assert not server.script  # every scripted reply was asked for
    (sync_result, sync_counts, sync_sent, sync_fb), (async_result, async_counts, async_sent, async_fb) = runs
    assert async_result == sync_result
    assert async_counts == sync_counts
    assert async_sent == sync_sent
    assert async_fb == sync_fb
    assert sync_counts["total"]["calls"] == len(sync_sent) > 0
