"""Counting questions from the decisions themselves (issue 44): several threads add to several
namespaces at once, with an LLM teacher behind the local server; the questions the memory
counts, kind by kind, equal the requests the server received, whatever the threads'
interleaving. (A request is counted on the thread that sent it, and an insert's operation and
placement from its own decision and record, not from differences of the memory's counters.)"""

from __future__ import annotations

import threading

import pytest
from langchain_openai import ChatOpenAI
from openai_server import schema_name
from test_placement_e2e import EMB, FACTS, keyword_llm

from langchain_membrain import LearnerConfig, MembrainMemory, Policy

THREADS = 4


@pytest.mark.parametrize("policy", ["teacher", "audited"])
def test_concurrent_writers_count_every_request_once(server, policy):
    server.responder = keyword_llm
    teacher = ChatOpenAI(model="test-model", base_url=server.base_url, api_key="x", max_retries=0, timeout=5)
    if policy == "teacher":  # the teacher decides every insert: a question each
        config = LearnerConfig(stage1=Policy(execute="teacher"), stage2=Policy(execute="teacher"))
    else:  # the student decides, every insert audited afterwards (answered by the operation's question)
        config = LearnerConfig(stage1=Policy(execute="model", query="always"),
                               stage2=Policy(execute="model", query="always"))
    start = threading.Barrier(THREADS)
    errors: list[BaseException] = []
    with MembrainMemory(teacher=teacher, embeddings=EMB, learner=config, relabel=False, dedupe=False,
                        teacher_budget=None) as mem:
        def write(i: int) -> None:
            try:
                start.wait()
                for fact in FACTS:
                    mem.add(fact, namespace=f"users/{i}")
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=write, args=(i,)) for i in range(THREADS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        mem.flush()
        assert not errors, errors[0]
        stats = mem.stats()
        questions = stats["questions"]
        names = [schema_name(r) for r in server.requests]
        assert sum(questions.values()) == len(names) == stats["teacher"]["total"]["calls"] > 0
        assert questions["operation"] == sum(name.startswith("Operation") for name in names) > 0
        assert questions["naming"] == names.count("AspectName")
        assert questions["placement"] + questions["audit"] == sum(
            not name.startswith("Operation") and name != "AspectName" for name in names)
        assert stats.process.inserts == THREADS * len(FACTS)


def in_process_workload(concurrent: bool) -> dict[str, int]:
    """Two writers add items (each asks the offline teacher its memory operation) and two put
    keyed values (no operation), each in a namespace of its own, with every placement the
    teacher's; the questions counted, by kind."""
    from helpers import WordEmbeddings

    forced = LearnerConfig(stage1=Policy(execute="teacher"), stage2=Policy(execute="teacher"))
    errors: list[BaseException] = []
    with MembrainMemory(embeddings=WordEmbeddings(), learner=forced, background=False, relabel=False,
                        dedupe=False, operations="teacher") as mem:
        def add(i: int) -> None:
            for n in range(25):
                mem.add(f"Person {i} likes topic {n % 5} in city {n}", namespace=f"adds/{i}")

        def put(i: int) -> None:
            for n in range(25):
                mem.put(f"puts/{i}", f"k{n}", {"content": f"Item {n} of shelf {i} holds book {n % 4}"})

        writers = [(add, 0), (add, 1), (put, 2), (put, 3)]
        if not concurrent:
            for write, i in writers:
                write(i)
        else:
            start = threading.Barrier(len(writers))

            def run(write, i: int) -> None:
                try:
                    start.wait()
                    write(i)
                except BaseException as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

            threads = [threading.Thread(target=run, args=w) for w in writers]
            for t in threads:
                t.start()
            for t in threads:
                t.join(300)
        assert not errors, errors[0]
        stats = mem.stats()
        assert stats["operations"]["teacher_questions"] == 50  # every add asked its operation
        return dict(stats["questions"])


def test_concurrent_writers_count_as_one_writer_does_with_an_in_process_teacher():
    """The offline teacher decides every placement and operation, on each namespace's own
    tree: the same questions are counted whether the writers run one after another or at
    once (an insert's operation counts when its own placement asked none, read from its own
    record, not from the memory's placement count, which the other writers move)."""
    assert in_process_workload(concurrent=True) == in_process_workload(concurrent=False)
