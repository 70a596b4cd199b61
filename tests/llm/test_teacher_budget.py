"""A teacher that hangs, refuses connections or answers garbage never stalls ``add()``, and
every counter agrees with what the local server received (issue 34).

The servers are real (tests/llm/openai_server.py); the breaker's clock is a plain function
the test holds still, so nothing here sleeps and nothing asserts a wall-clock time (the
latencies are measured by a script, in the change's notes).
"""

from __future__ import annotations

import logging
import socket

import openai
import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from openai_server import answer, http_error, schema_name, slow, text
from test_placement_e2e import FACTS, keyword_llm

from langchain_membrain import MembrainMemory
from langchain_membrain.errors import ConfigurationError, InvalidOperationError, TeacherError
from langchain_membrain.teachers.answers import TeacherUnavailable
from langchain_membrain.teachers.budget import CircuitBreaker, deadline, requests_sent
from langchain_membrain.teachers.heuristic import HeuristicTeacher
from langchain_membrain.teachers.openai_teacher import OpenAITeacher
from langchain_membrain.teachers.prompts import PROMPT_BUDGET_TOKENS
from langchain_membrain.teachers.resolve import resolve_teacher

EMB = DeterministicFakeEmbedding(size=8)
TEXTS = [f"My friend number {i} likes {w} and lives in {c}." for i, (w, c) in enumerate(zip(
    "tea chess jazz hiking soup kites wine opera golf tennis bread maps clay yoga film kayak salsa chess tea jazz".split(),
    "Paris Rome Oslo Lima Kyiv Cairo Quito Riga Baku Doha Bern Suva Apia Male Lome Nice Turin Leeds Graz Pisa".split()))]


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def teacher_at(base_url: str, clock: Clock | None = None, **options) -> OpenAITeacher:
    breaker = CircuitBreaker(clock=clock or Clock(), **options.pop("breaker", {}))
    return OpenAITeacher(openai.OpenAI(base_url=base_url, api_key="x"), "test-model", breaker=breaker,
                         raise_on_failure=True, **{"timeout": 1.0, **options})


def refusing_url() -> str:
    with socket.socket() as s:  # a port nobody listens on: connections are refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "langchain_membrain" and r.levelno >= logging.WARNING]


def counted_requests(stats) -> int:
    """The headline question counters: every kind, in requests."""
    return sum(stats["questions"].values())


def assert_all_stored(mem: MembrainMemory, texts: list[str]) -> None:
    for t in texts:
        hits = mem.search(t, namespace="u", limit=3)
        assert any(h.value["content"] == t for h in hits), t


# ------------------------------------------------------------------ hanging
def test_a_hanging_endpoint_never_stalls_an_add(server, caplog):
    """Accepts the connection, never answers: at most three adds wait (each for the budget
    only), then the questions go to the background; the background's questions time out,
    the breaker opens with one warning; every fact is stored and searchable."""
    caplog.set_level(logging.INFO, logger="langchain_membrain")
    server.responder = lambda req: slow(30, answer({}))
    teacher = teacher_at(server.base_url, timeout=1.0)
    with MembrainMemory(teacher=teacher, embeddings=EMB, teacher_budget=0.3, relabel=False) as mem:
        for t in TEXTS:
            mem.add(t, namespace="u")
            assert mem.last_operation.by in ("fallback", "student")  # never "teacher"
        assert_all_stored(mem, TEXTS)  # searchable at once, before any background answer
        mem.flush()
        stats = mem.stats()
    kinds = stats["teacher"]["total"]["failure_kinds"]
    assert kinds.get("budget", 0) <= 3  # at most three adds waited, each for its budget
    assert stats["teacher"]["health"]["slow"]["state"] == "open"
    assert stats["teacher"]["health"]["state"] == "open" and kinds.get("timeout", 0) >= 1
    assert stats["without_teacher"] == len(TEXTS)
    assert stats["teacher"]["total"]["calls"] == counted_requests(stats) == len(server.requests)
    assert stats["operations"]["agreement"] is None and stats["operations"]["compared"] == 0
    assert stats["stage1"]["labelled"] == 0 and stats["stage2"]["labelled"] == 0  # no answer, no label
    assert len(warnings_of(caplog)) == 1 and "no answer within the insert's budget" in warnings_of(caplog)[0]
    assert any("is failing" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)  # already down


@pytest.mark.parametrize("endpoint", ["hanging", "refusing"])
def test_a_teacher_that_fails_warns_once_however_many_adds(endpoint, caplog):
    """Issue 56: with the client's default timeout (30 s), a hanging endpoint used to log
    no warning over 20 adds (only the budget cut them, logged at INFO). Now a hanging and a
    refusing endpoint each log one warning when the teacher goes down, and each add returns
    within the insert's budget, not the client's timeout."""
    import time

    from openai_server import HangingServer

    caplog.set_level(logging.INFO, logger="langchain_membrain")
    hanging = HangingServer().start() if endpoint == "hanging" else None
    try:
        url = hanging.base_url if hanging else refusing_url()
        teacher = OpenAITeacher(openai.OpenAI(base_url=url, api_key="x"), "test-model")  # timeout 30 s
        with MembrainMemory(teacher=teacher, embeddings=EMB, teacher_budget=0.3, relabel=False) as mem:
            for t in TEXTS:
                t0 = time.monotonic()
                mem.add(t, namespace="u")
                assert time.monotonic() - t0 < 10  # bounded by the budget, never the 30 s timeout
            assert mem.stats()["teacher_failures"] > 0
    finally:
        if hanging:
            hanging.stop()
    warned = [r.getMessage() for r in caplog.records
              if r.name.startswith("langchain_membrain") and r.levelno >= logging.WARNING]
    assert 1 <= len(warned) <= 5, warned
    assert ("no answer within the insert's budget" if hanging else "is failing") in warned[0]


# ------------------------------------------------------------------ refusing
def test_a_refusing_endpoint_never_stalls_an_add(caplog):
    caplog.set_level(logging.INFO, logger="langchain_membrain")
    teacher = teacher_at(refusing_url())
    with MembrainMemory(teacher=teacher, embeddings=EMB, relabel=False) as mem:
        mem.add(TEXTS[0], namespace="u")
        assert teacher.stats()["total"]["calls"] <= 3  # the breaker opens at the third refusal
        for t in TEXTS[1:]:
            mem.add(t, namespace="u")
        assert_all_stored(mem, TEXTS)
        mem.flush()
        stats = mem.stats()
    assert stats["teacher"]["total"]["calls"] == 3 == counted_requests(stats)  # then nothing is sent
    assert stats["teacher"]["total"]["failure_kinds"] == {"connection": 3}
    # the first two adds sent their operation questions (the breaker opened in the second)
    assert stats["teacher_skipped"] > 0 and stats["operations"]["teacher_skipped"] == len(TEXTS) - 2
    assert stats["without_teacher"] == len(TEXTS) and stats["operations"]["teacher_failures"] == len(TEXTS)
    assert len(warnings_of(caplog)) == 1


# ------------------------------------------------------------------ garbage
@pytest.mark.parametrize("threshold", [3, 10**6])
def test_garbage_answers_are_counted_as_the_server_received_them(server, threshold):
    """Every answer is unusable JSON. With the default breaker (3) the teacher is soon not
    asked; without one (10**6) every question is sent and retried once, in the foreground,
    the background and naming: the counters add up to the server's requests either way."""
    server.responder = lambda req: text("not json at all")
    teacher = teacher_at(server.base_url, breaker={"threshold": threshold})
    with MembrainMemory(teacher=teacher, embeddings=EMB, naming_interval=1) as mem:
        mem.add_many(TEXTS, namespace="u")
        mem.flush()
        stats = mem.stats()
        assert mem.last_operation.by == "fallback" and not mem.last_operation.answered
    received = len(server.requests)
    assert stats["teacher"]["total"]["calls"] == received
    assert counted_requests(stats) == stats["teacher_calls"] + stats["naming_calls"] == received
    assert stats["questions"]["operation"] == stats["operations"]["teacher_questions"] \
        == stats["teacher"]["operation"]["calls"]
    assert stats["teacher"]["total"]["failures"] == received  # every request failed
    assert stats["operations"]["teacher_failures"] == len(TEXTS) and stats["operations"]["agreement"] is None
    assert stats["stage1"]["labelled"] == stats["stage2"]["labelled"] == 0
    if threshold > 3:
        assert stats["teacher"]["total"]["retries"] > 0 and received > 2 * len(TEXTS)
        assert {schema_name(r) for r in server.requests} >= {"OperationPlaceAnswer", "PlaceAnswer"}
    else:
        assert received == 3
    assert max(sum(max(1, len(m["content"]) // 4) for m in r["messages"]) for r in server.requests) \
        <= PROMPT_BUDGET_TOKENS


# ---------------------------------------------------- a slow but healthy teacher
def test_a_slow_teacher_answers_in_the_background_and_corrects(server, caplog):
    """Answers come after 0.4 s, past a 0.15 s budget: the adds go on without waiting (one
    warning: the inserts go on without the teacher), the background asks each deferred
    placement again and its answers train the student and correct the tree."""
    caplog.set_level(logging.INFO, logger="langchain_membrain")
    server.responder = lambda req: slow(0.4, keyword_llm(req))
    teacher = teacher_at(server.base_url, timeout=5.0)
    with MembrainMemory(teacher=teacher, embeddings=EMB, teacher_budget=0.15, relabel=False, dedupe=False) as mem:
        mem.add_many(FACTS, namespace="computer")
        mem.flush()
        stats = mem.stats()
        tree = mem.tree("computer")
        tree.check_invariants()
        assert sorted(tree.node(f).text for f in tree.facts()) == sorted(FACTS)
    assert stats["teacher"]["health"]["state"] == "closed" and stats["teacher"]["health"]["slow"]["state"] == "open"
    assert stats["without_teacher"] == len(FACTS)
    assert stats["teacher"]["place"]["failures"] == 0 and stats["teacher"]["place"]["calls"] > 0  # answered later
    assert stats["stage2"]["labelled"] > 0 or stats["stage1"]["labelled"] > 0  # its answers were learned
    assert stats["teacher"]["total"]["calls"] == counted_requests(stats) == len(server.requests)
    # one warning: the inserts go on without it (it is never fast enough to come back)
    assert len(warnings_of(caplog)) == 1 and "no answer within the insert's budget" in warnings_of(caplog)[0]


# ------------------------------------------------------------------ the breaker
def test_the_breaker_backs_off_probes_and_recovers():
    clock = Clock()
    b = CircuitBreaker(threshold=3, backoff_s=10, max_backoff_s=25, clock=clock)
    assert [b.failure("x") for _ in range(3)] == [False, False, True]  # opens once, at the third
    assert not b.allow() and b.snapshot()["retry_in_s"] == 10
    clock.now = 10
    assert b.allow() and not b.allow()  # one probe at a time
    assert b.failure("again") is False and b.snapshot()["backoff_s"] == 20  # doubled
    clock.now = 29
    assert not b.allow()
    clock.now = 30
    assert b.allow()
    b.failure("and again")
    assert b.snapshot()["backoff_s"] == 25  # capped
    clock.now = 55
    assert b.allow() and b.success() is True  # recovered
    assert b.snapshot()["state"] == "closed" and b.snapshot()["backoff_s"] == 10 and b.allow()
    with pytest.raises(ValueError):
        CircuitBreaker(threshold=0)


def test_one_warning_when_failing_and_one_when_it_answers_again(server, small_tree, caplog):
    from llm_helpers import new_fact

    caplog.set_level(logging.INFO, logger="langchain_membrain")
    clock = Clock()
    server.responder = lambda req: http_error(500)
    teacher = teacher_at(server.base_url, clock, max_retries=0)
    for _ in range(6):
        with pytest.raises(TeacherError):
            teacher.try_name_aspect(["a laptop", "a desktop"])
    assert len(server.requests) == 3 and teacher.stats()["name"]["skipped"] == 3  # not sent while open
    assert teacher.requests_sent() == 3 == requests_sent(teacher)
    clock.now = 10  # the back-off has passed: the next question probes
    server.responder = lambda req: answer({"label": "computers"})
    assert teacher.try_name_aspect(["a laptop", "a desktop"]) == "computers"
    assert teacher.health()["state"] == "closed"
    messages = warnings_of(caplog)
    assert len(messages) == 2 and "is failing" in messages[0] and "answers again" in messages[1]
    with pytest.raises(TeacherUnavailable):  # past a deadline nothing is sent
        with deadline(0.0):
            teacher.try_place(new_fact("x"), small_tree)
    assert len(server.requests) == 4


# ------------------------------------------------------------------ settings and the resolver
def test_teacher_budget_is_validated():
    for bad in (0, -1, "2", True):
        with pytest.raises(InvalidOperationError):
            MembrainMemory(embeddings=EMB, teacher_budget=bad)
    assert MembrainMemory(embeddings=EMB, teacher_budget=None).teacher_budget is None
    assert MembrainMemory(embeddings=EMB).teacher_budget == 2.0


def test_one_resolver_and_the_library_stays_offline(monkeypatch, server):
    from langchain_membrain.cli import teacher_from_env

    monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
    monkeypatch.setenv("MEMBRAIN_TEACHER_MODEL", "env-model")
    with MembrainMemory(embeddings=EMB) as mem:  # the library reads no environment
        assert isinstance(mem.teacher, HeuristicTeacher)
        assert set(mem.stats()["teacher"]) >= {"total", "place", "operation", "health"}  # every key, offline too
    teacher, label = teacher_from_env()  # the CLI does, through the same resolver
    assert isinstance(teacher, OpenAITeacher) and teacher.raise_on_failure and teacher.model == "env-model"
    assert label == f"LLM teacher env-model at {server.base_url}"
    assert teacher_from_env(offline=True)[0] is None
    env_teacher = resolve_teacher(env={"OPENAI_BASE_URL": server.base_url, "MEMBRAIN_TEACHER_MODEL": "m"})
    assert isinstance(env_teacher, OpenAITeacher) and env_teacher.model == "m"
    assert isinstance(resolve_teacher(env={}), HeuristicTeacher)
    with pytest.raises(TeacherError):
        resolve_teacher(env={"OPENAI_API_KEY": "k"})  # no model named
    with pytest.raises(ConfigurationError, match="provider:model"):
        resolve_teacher("gpt-4o")


def test_the_cli_says_when_a_fact_was_stored_without_the_teacher(capsys):
    from langchain_membrain.cli import main

    teacher = teacher_at(refusing_url())
    with MembrainMemory(teacher=teacher, embeddings=EMB) as mem:
        assert main(["add", "Maya is allergic to peanuts", "--ns", "u"], memory=mem) == 0
        out = capsys.readouterr().out
        assert "stored" in out and "without the teacher" in out
        assert main(["stats"], memory=mem) == 0
        assert "without teacher" in capsys.readouterr().out
    with MembrainMemory(embeddings=EMB) as mem:  # the offline teacher always answers
        assert main(["add", "Maya is allergic to peanuts", "--ns", "u"], memory=mem) == 0
        assert "without the teacher" not in capsys.readouterr().out
